"""The ASGI app: ``POST /v1/query``, OpenAI-compatible ``POST /v1/chat/completions`` (SSE),
``GET /healthz``, ``/readyz`` and ``/metrics``. A thin layer over :mod:`ragcost.runtime.api`."""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Optional

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ragcost.errors import RagcostError
from ragcost.runtime.api import Answer
from ragcost.serve.batcher import QueueFull, Ticket
from ragcost.serve.models import ChatRequest, QueryRequest, one_line
from ragcost.serve.service import Service

DISCONNECTED = "client disconnected"
DEADLINE = "deadline exceeded"


class HTTPError(Exception):
    def __init__(self, status: int, message: str, param: Optional[str] = None, headers: Optional[dict] = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.headers = status, message, param, headers or {}

    def response(self) -> JSONResponse:
        kind = {401: "authentication_error", 413: "request_too_large", 422: "invalid_request_error",
                429: "rate_limit_error", 504: "timeout"}.get(self.status, "server_error")
        body = {"error": {"message": self.message, "type": kind, "param": self.param}}
        return JSONResponse(body, status_code=self.status, headers=self.headers)


async def _body(request: Request, limit: int, model):
    """The parsed body: 413 past ``limit`` bytes (read no further), 422 naming the bad field."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HTTPError(413, f"request body is {declared} bytes; the limit is {limit} (serve.max_body_bytes)")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPError(413, f"request body exceeds {limit} bytes (serve.max_body_bytes)")
        chunks.append(chunk)
    try:
        data = json.loads(b"".join(chunks) or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise HTTPError(422, f"body: not valid JSON ({getattr(e, 'msg', e)})", "body") from None
    if not isinstance(data, dict):
        raise HTTPError(422, "body: expected a JSON object", "body")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        field, msg = one_line(e)
        raise HTTPError(422, msg, field) from None


def _tenant(svc: Service, request: Request):
    if not svc.keys.enabled:
        return None
    auth = request.headers.get("authorization", "")
    key = auth[7:].strip() if auth[:7].lower() == "bearer " else None
    tenant = svc.keys.lookup(key)  # the same work for a wrong key and a missing one
    if tenant is None:
        raise HTTPError(401, "missing or invalid API key; send Authorization: Bearer KEY")
    return tenant


async def _ticket(svc: Service, request: Request, text: str, filter_, k) -> Ticket:
    if not svc.ready:
        raise HTTPError(503, "warming up; retry when /readyz says ready", headers={"Retry-After": "1"})
    tenant = _tenant(svc, request)
    try:
        return await svc.submit(text, filter_, k, tenant)
    except QueueFull:
        svc.metrics.requests.labels(request.url.path, "429").inc()
        raise HTTPError(429, f"queue full ({svc.config.max_queue} waiting, serve.max_queue); retry later",
                        headers={"Retry-After": str(svc.batcher.retry_after_s())}) from None
    except RagcostError as e:  # a filter naming an unknown field or operator
        raise HTTPError(422, f"filter: {e}", "filter") from None


async def _disconnected(request: Request) -> None:
    """Returns when the client goes away (the body is already read, so the next message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _await_answer(svc: Service, t: Ticket, deadline: float, request: Request) -> Optional[Answer]:
    """The answer; None when the client left first (its query is then recorded as disconnected)."""
    watch = asyncio.ensure_future(_disconnected(request))
    answer = asyncio.ensure_future(asyncio.shield(t.answer))
    try:
        done, _ = await asyncio.wait({watch, answer}, timeout=max(0.0, deadline - time.monotonic()),
                                     return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        svc.abandon(t, DISCONNECTED)
        raise
    finally:
        watch.cancel()
    if answer in done:
        return answer.result()
    answer.cancel()
    if watch in done:
        svc.abandon(t, DISCONNECTED)
        return None
    svc.abandon(t, DEADLINE)
    raise HTTPError(504, f"no answer within serve.deadline_s = {svc.config.deadline_s} s")


def _usage(a: Answer) -> dict[str, Any]:
    """OpenAI's usage, extended with what this query cost (equal to its ledger rows)."""
    gen = [r for r in a.rows if r["stage"].startswith("generate")]
    prompt = sum(r["input_tokens"] or 0 for r in gen)
    completion = sum(r["output_tokens"] or 0 for r in gen)
    by_stage: dict[str, float] = {}
    for r in a.rows:
        by_stage[r["stage"]] = by_stage.get(r["stage"], 0.0) + float(r["cost_usd"])
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "cost_usd": a.cost, "cost_by_stage": by_stage, "query_id": a.id, "useful": a.useful}


def build_app(pipeline: str | Path, ledger_url: Optional[str] = None, warm_first: bool = False) -> Starlette:
    """``warm_first``: warm up before accepting connections. uvicorn's ``--workers N`` share one
    listening socket and a worker accepts only once its startup is done, so a cold worker then never
    takes a request (it would answer 503 while a warm sibling says ready). One worker warms in the
    background instead, so ``/healthz`` answers and ``/readyz`` says 503 meanwhile."""
    svc = Service(pipeline, ledger_url)

    @asynccontextmanager
    async def lifespan(app):
        from ragcost.serve.lifetime import start_serve_lifetime, stop_serve_lifetime

        life = start_serve_lifetime(svc)  # provisioned time: from now to shutdown, serving or idle
        warm = asyncio.create_task(svc.start())
        if warm_first:
            await warm
        try:
            yield
        finally:
            await warm
            await svc.stop()
            stop_serve_lifetime(life)

    async def query(request: Request) -> Response:
        req = await _body(request, svc.config.max_body_bytes, QueryRequest)
        deadline = time.monotonic() + svc.config.deadline_s
        t = await _ticket(svc, request, req.text, req.filter, req.k)
        a = await _await_answer(svc, t, deadline, request)
        if a is None:
            return Response(status_code=499)  # nobody is listening; the ledger has the query
        await svc.commit(t, a)
        svc.metrics.requests.labels("/v1/query", "200").inc()
        return JSONResponse(a.to_json())

    async def chat(request: Request) -> Response:
        req = await _body(request, svc.config.max_body_bytes, ChatRequest)
        try:
            text = req.question()
        except ValueError as e:
            raise HTTPError(422, str(e), "messages") from None
        deadline = time.monotonic() + svc.config.deadline_s
        t = await _ticket(svc, request, text, req.filter, req.k)
        if req.stream:
            usage = bool(req.stream_options and req.stream_options.include_usage)
            return StreamingResponse(_sse(svc, t, deadline, usage), media_type="text/event-stream")
        a = await _await_answer(svc, t, deadline, request)
        if a is None:
            return Response(status_code=499)
        await svc.commit(t, a)
        if not a.ok:
            raise HTTPError(502, a.error or "the query failed")
        return JSONResponse(_completion(svc, a))

    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": True})

    async def readyz(request: Request) -> Response:
        return JSONResponse({"ready": svc.ready}, status_code=200 if svc.ready else 503)

    async def metrics(request: Request) -> Response:
        svc.metrics.queue_depth.set(svc.batcher.depth)
        body, ctype = svc.metrics.render()
        return Response(body, media_type=ctype)

    async def on_error(request: Request, exc: HTTPError) -> Response:
        return exc.response()

    app = Starlette(routes=[
        Route("/v1/query", query, methods=["POST"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/healthz", healthz), Route("/readyz", readyz), Route("/metrics", metrics),
    ], lifespan=lifespan, exception_handlers={HTTPError: on_error})
    app.state.service = svc
    return app


def _completion(svc: Service, a: Answer) -> dict[str, Any]:
    return {"id": f"chatcmpl-{a.id}", "object": "chat.completion", "created": int(time.time()), "model": svc.name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": a.answer or ""}, "finish_reason": "stop"}],
            "usage": _usage(a), "ragcost": a.to_json()}


def _chunk(t: Ticket, name: str, delta: dict, finish: Optional[str] = None, usage: Optional[dict] = None) -> str:
    body = {"id": f"chatcmpl-{t.state.id}", "object": "chat.completion.chunk", "created": int(time.time()), "model": name,
            "choices": [] if usage is not None else [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        body["usage"] = usage
    return f"data: {json.dumps(body)}\n\n"


async def _sse(svc: Service, t: Ticket, deadline: float, include_usage: bool) -> AsyncIterator[str]:
    """Pieces as generation streams them; the rows are committed before the last chunk is sent."""
    waiter = getter = None
    try:
        yield _chunk(t, svc.name, {"role": "assistant", "content": ""})
        waiter = asyncio.ensure_future(asyncio.shield(t.answer))
        while True:
            getter = asyncio.ensure_future(t.events.get())
            done, _ = await asyncio.wait({getter, waiter}, timeout=max(0.0, deadline - time.monotonic()),
                                         return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                kind, piece = getter.result()
                if kind == "text":
                    yield _chunk(t, svc.name, {"content": piece})
                continue
            getter.cancel()
            if not done:
                svc.abandon(t, DEADLINE)
                yield f"data: {json.dumps({'error': {'message': DEADLINE, 'type': 'timeout'}})}\n\n"
                return
            break
        while not t.events.empty():  # pieces that arrived with the answer
            kind, piece = t.events.get_nowait()
            if kind == "text":
                yield _chunk(t, svc.name, {"content": piece})
        a = waiter.result()
        await svc.commit(t, a)
        if not a.ok:
            yield f"data: {json.dumps({'error': {'message': a.error, 'type': 'server_error'}})}\n\n"
        else:
            yield _chunk(t, svc.name, {}, "stop")
            if include_usage:
                yield _chunk(t, svc.name, {}, usage=_usage(a))
        yield "data: [DONE]\n\n"
    finally:
        for f in (getter, waiter):
            if f is not None and not f.done():
                f.cancel()
        if not t.recorded:  # the client went away (the response was cancelled) before the end
            svc.abandon(t, DISCONNECTED)
