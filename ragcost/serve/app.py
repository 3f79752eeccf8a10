"""The ASGI app: ``POST /v1/query``, OpenAI-compatible ``POST /v1/chat/completions`` (SSE) and
``GET /v1/models``, ``GET /healthz``, ``/readyz`` and ``/metrics``. A thin layer over :mod:`ragcost.runtime.api`.

Every route checks the key first, then reads the body (so a stranger learns nothing from a 400 or
413), answers every error with OpenAI's error object and is counted in ``ragcost_requests_total``
by route, status, tenant and outcome.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import signal
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, Optional

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ragcost.runtime.api import Answer
from ragcost.serve.batcher import DEADLINE, QueueFull, Ticket
from ragcost.serve.cors import CORS
from ragcost.serve.errors import HTTPError, from_exception, log, outcome_of
from ragcost.serve.models import ChatRequest, QueryRequest, one_line
from ragcost.serve.options import generation_options
from ragcost.serve.render import blocked, public_bytes, public_json
from ragcost.serve.service import Service

DISCONNECTED = "client disconnected"
MAX_DEPTH = 32  # JSON nesting a body may have: far above any real request, far below Python's recursion limit
ROUTES = ("/v1/query", "/v1/chat/completions", "/v1/models", "/healthz", "/readyz", "/metrics")


class Call:
    """What one request's count in the metrics and its span need: its route, tenant and outcome (and for the
    span, the method, the headers a caller's trace context comes in, and the query's ticket and answer)."""

    def __init__(self, route: str, method: str = "POST", headers: Any = None) -> None:
        self.route, self.tenant, self.outcome, self.t0 = route, None, None, time.monotonic()
        self.method, self.headers = method, headers
        self.ticket: Optional[Ticket] = None
        self.answer: Optional[Answer] = None


def too_deep(raw: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON in ``raw`` nests arrays/objects deeper than ``limit`` (brackets in strings do not count)."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    depth, in_str, esc = 0, False, False
    for b in raw:
        if in_str:
            if esc:
                esc = False
            elif b == 0x5C:
                esc = True
            elif b == 0x22:
                in_str = False
        elif b == 0x22:
            in_str = True
        elif b in (0x5B, 0x7B):
            depth += 1
            if depth > limit:
                return True
        elif b in (0x5D, 0x7D):
            depth -= 1
    return False


async def _read(request: Request, limit: int, timeout_s: float) -> bytes:
    """The raw body: 413 past ``limit`` bytes (read no further), 408 when it has not all come within ``timeout_s``,
    415 for a compressed one (read no further: it would only be "not valid JSON")."""
    encoding = request.headers.get("content-encoding", "").strip().lower()
    if encoding not in ("", "identity"):
        raise HTTPError(415, f"Content-Encoding {encoding[:40]!r} is not supported; send the JSON body uncompressed "
                        "(no Content-Encoding header)", "body", code="unsupported_content_encoding",
                        headers={"Connection": "close"})
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HTTPError(413, f"request body is {declared} bytes; the limit is {limit} (serve.max_body_bytes)",
                        code="request_too_large", headers={"Connection": "close"})
    chunks, size = [], 0
    end = time.monotonic() + timeout_s
    stream = request.stream().__aiter__()
    while True:
        try:
            chunk = await asyncio.wait_for(_next(stream), timeout=max(0.0, end - time.monotonic()))
        except asyncio.TimeoutError:
            raise HTTPError(408, f"the request body did not arrive within {timeout_s:g} s (serve.body_timeout_s)",
                            code="request_timeout", headers={"Connection": "close"}) from None
        if chunk is None:
            break
        size += len(chunk)
        if size > limit:
            raise HTTPError(413, f"request body exceeds {limit} bytes (serve.max_body_bytes)", code="request_too_large",
                            headers={"Connection": "close"})
        chunks.append(chunk)
    request.state.body_read = True
    return b"".join(chunks)


async def _next(stream) -> Optional[bytes]:
    """The next chunk, None at the end. Not StopAsyncIteration through ``wait_for``: the task holding that
    exception, its traceback and wait_for's frame form a reference cycle per request, garbage that only
    a full collection frees (and a full collection pauses every request)."""
    try:
        return await stream.__anext__()
    except StopAsyncIteration:
        return None


def parse(raw: bytes, model):
    """The validated body: a 400 naming the field for anything malformed, too deep or unknown."""
    if too_deep(raw):
        raise HTTPError(400, f"body: JSON nested deeper than {MAX_DEPTH} levels; flatten it", "body", code="invalid_json")
    try:
        data = json.loads(raw or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise HTTPError(400, f"body: not valid JSON ({getattr(e, 'msg', e)})", "body", code="invalid_json") from None
    if not isinstance(data, dict):
        raise HTTPError(400, "body: expected a JSON object", "body", code="invalid_json")
    try:
        # strict: JSON's own types, as OpenAI's API takes them ("stream": "yes", "max_tokens": "5", "n": true are
        # a 400 naming the field, not coerced to true, 5 and 1)
        return model.model_validate(data, strict=True)
    except ValidationError as e:
        field, msg = one_line(e)
        raise HTTPError(400, msg, field, code="invalid_value") from None


def _body_unread(request: Request) -> bool:
    """Whether the request announced a body that this server has not read."""
    if getattr(request.state, "body_read", False):
        return False
    length = request.headers.get("content-length", "0").strip()
    return "transfer-encoding" in request.headers or not (length.isdigit() and int(length) == 0)


def _bearer(request: Request) -> Optional[str]:
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() if auth[:7].lower() == "bearer " else None


def _tenant(svc: Service, request: Request, call: Call):
    if not svc.keys.enabled:
        return None
    tenant = svc.keys.lookup(_bearer(request))  # the same work for a wrong key and a missing one
    if tenant is None:
        raise HTTPError(401, "missing or invalid API key; send Authorization: Bearer KEY", code="invalid_api_key")
    call.tenant = tenant.name
    return tenant


def _ready(svc: Service) -> None:
    if not svc.ready:
        raise HTTPError(503, "warming up; retry when /readyz says ready", headers={"Retry-After": "1"}, code="warming_up")


def _overloaded(svc: Service, e: QueueFull) -> HTTPError:
    if e.reason == "unmeasured":
        msg = f"overloaded: the first batch is still running, so no service rate is measured yet; retry after {e.retry_after_s} s"
    elif e.reason == "deadline":
        msg = (f"overloaded: a request admitted now would finish in about {e.predicted_s:.1f} s, past serve.deadline_s = "
               f"{svc.config.deadline_s:g} s; retry after {e.retry_after_s} s")
    else:
        msg = f"queue full ({svc.config.max_queue} waiting, serve.max_queue); retry after {e.retry_after_s} s"
    return HTTPError(429, msg, headers={"Retry-After": str(e.retry_after_s)}, code="overloaded")


def _admit(svc: Service) -> None:
    """Refuse an overloaded request before its body is read or parsed: a 429 costs a few comparisons."""
    try:
        svc.batcher.check(svc.config.deadline_s)
    except QueueFull as e:
        raise _overloaded(svc, e) from None


async def _ticket(svc: Service, call: "Call", text: str, filter_, k, tenant, options=None, user=None) -> Ticket:
    try:  # the deadline runs from the request's arrival, not from when its body was parsed
        call.ticket = await svc.submit(text, filter_, k, tenant, options, user, arrived=call.t0)
    except QueueFull as e:
        raise _overloaded(svc, e) from None
    return call.ticket


async def _disconnected(request: Request) -> None:
    """Returns when the client goes away (the body is already read, so the next message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _await_answer(svc: Service, t: Ticket, request: Request) -> Optional[Answer]:
    """The answer; None when the client left first (its query is then recorded as disconnected)."""
    watch = asyncio.ensure_future(_disconnected(request))
    answer = asyncio.ensure_future(asyncio.shield(t.answer))
    try:
        done, _ = await asyncio.wait({watch, answer}, timeout=max(0.0, t.deadline - time.monotonic()),
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
    raise _late(svc)


def _late(svc: Service) -> HTTPError:
    return HTTPError(504, f"no answer within serve.deadline_s = {svc.config.deadline_s:g} s", code="deadline_exceeded")


def _usage(svc: Service, a: Answer, content: str) -> dict[str, Any]:
    """OpenAI's usage, extended with what this query cost (equal to its ledger rows).

    Tokens are the generator's, as its ledger rows hold them. A generator that reads and writes no tokens of its
    own (the extractive one: no LLM, priced by CPU) reports none; then the prompt (the question and the passages
    it read) and the content sent are counted with the embedder's tokenizer, and ``tokens_counted_with`` says so."""
    gen = [r for r in a.rows if r["stage"].startswith("generate")]
    prompt = sum(r["input_tokens"] or 0 for r in gen)
    completion = sum(r["output_tokens"] or 0 for r in gen)
    counted: dict[str, Any] = {}
    if not prompt and not completion:
        tok = svc.session.pipe.embedder.tokenizer

        def count(texts: list[str]) -> int:  # the text's own tokens, without the model's [CLS]/[SEP]
            return sum(len(ids) for ids in tok(texts, add_special_tokens=False, truncation=False)["input_ids"])

        prompt = count([a.text, *(str(h.get("text") or "") for h in a.hits)])
        completion = count([content]) if content else 0
        counted = {"tokens_counted_with": "embedder tokenizer"}
    by_stage: dict[str, float] = {}
    for r in a.rows:
        by_stage[r["stage"]] = by_stage.get(r["stage"], 0.0) + float(r["cost_usd"])
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "cost_usd": a.cost, "cost_by_stage": by_stage, "query_id": a.id, "useful": a.useful, **counted}


def _outcome(a: Answer) -> str:
    return "blocked" if blocked(a) else ("ok" if a.ok else "failed")


def build_app(pipeline: str | Path, ledger_url: Optional[str] = None, warm_first: bool = False,
              tracer_provider: Any = None, replica: Optional[str] = None) -> Starlette:
    """``warm_first``: warm up before accepting connections. uvicorn's ``--workers N`` share one
    listening socket and a worker accepts only once its startup is done, so a cold worker then never
    takes a request (it would answer 503 while a warm sibling says ready). One worker warms in the
    background instead, so ``/healthz`` answers and ``/readyz`` says 503 meanwhile.
    ``tracer_provider``: where request spans go when the pipeline has tracing on (default: the global one).
    ``replica``: this server's name on its ledger rows and metrics (:mod:`ragcost.serve.replica`)."""
    svc = Service(pipeline, ledger_url, tracer_provider=tracer_provider, replica=replica)

    @asynccontextmanager
    async def lifespan(app):
        from ragcost.serve.lifetime import ready_serve_lifetime, start_serve_lifetime, stop_serve_lifetime

        life = start_serve_lifetime(svc)  # provisioned time: from now to shutdown, serving or idle
        warm = asyncio.create_task(svc.start())
        warm.add_done_callback(lambda _t: ready_serve_lifetime(life))  # start-up ends once the warm-up is done
        try:  # SIGHUP reloads the keys (only where the loop runs in the main thread)
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, svc.reload_keys)
        except (NotImplementedError, RuntimeError, ValueError, AttributeError):
            pass
        if warm_first:
            await warm
        try:
            yield
        finally:
            await warm
            await svc.stop()
            stop_serve_lifetime(life)

    def route(path: str, fn: Callable[[Request, Call], Awaitable[Response]], methods: list[str]) -> Route:
        async def endpoint(request: Request) -> Response:
            call = Call(path, request.method, request.headers)
            try:
                resp = await fn(request, call)
            except ClientDisconnect:
                call.outcome, resp = "disconnected", Response(status_code=499)
            except Exception as e:  # every error is OpenAI's error object, never a traceback
                err = from_exception(e, f"{request.method} {path}")
                if _body_unread(request):  # refused before its body was read (401, 429, 503): the connection closes,
                    err.headers.setdefault("Connection", "close")  # so a slow body cannot hold it open after the answer
                call.outcome, resp = err.outcome, err.response()
                # This frame -> err -> its traceback -> this frame: a reference cycle per error response (every
                # 429 among them) that reference counting cannot free, only a full collection.
                del err
            if not isinstance(resp, StreamingResponse):  # a stream counts itself when it ends
                call.outcome = call.outcome or outcome_of(resp.status_code)
                svc.metrics.request(path, resp.status_code, call.tenant, call.outcome, time.monotonic() - call.t0)
                _span(svc, call, resp.status_code)
            return resp

        return Route(path, endpoint, methods=methods)

    async def query(request: Request, call: Call) -> Response:
        tenant = _tenant(svc, request, call)
        _ready(svc)
        _admit(svc)
        req = parse(await _read(request, svc.config.max_body_bytes, svc.config.body_timeout_s), QueryRequest)
        t = await _ticket(svc, call, req.text, req.filter, req.k, tenant)
        a = call.answer = await _await_answer(svc, t, request)
        if a is None:
            call.outcome = "disconnected"
            return Response(status_code=499)  # nobody is listening; the ledger has the query
        await svc.commit(t, a)
        if a.error == DEADLINE:
            raise _late(svc)
        call.outcome = _outcome(a)
        body = t.body if t.body is not None else public_bytes(a)  # rendered in the batch thread
        return Response(body, media_type="application/json")

    async def chat(request: Request, call: Call) -> Response:
        tenant = _tenant(svc, request, call)
        _ready(svc)
        _admit(svc)
        req = parse(await _read(request, svc.config.max_body_bytes, svc.config.body_timeout_s), ChatRequest)
        if req.model != svc.name:
            raise HTTPError(404, f"model {req.model!r} is not served here; this server serves {svc.name!r} (GET /v1/models)",
                            "model", code="model_not_found")
        text, err = req.question()
        if err:
            raise HTTPError(400, err, "messages", code="invalid_value")
        options = generation_options(req, svc.caps)
        t = await _ticket(svc, call, text, req.filter, req.k, tenant, options, req.user)
        t.stream = bool(req.stream)
        if req.stream:
            usage = bool(req.stream_options and req.stream_options.include_usage)
            return StreamingResponse(_sse(svc, t, usage, call), media_type="text/event-stream")
        a = call.answer = await _await_answer(svc, t, request)
        if a is None:
            call.outcome = "disconnected"
            return Response(status_code=499)
        await svc.commit(t, a)
        if a.error == DEADLINE:
            raise _late(svc)
        if not a.ok and not blocked(a):
            raise HTTPError(502, a.error or "the query failed", code="pipeline_failed")
        call.outcome = _outcome(a)
        return JSONResponse(_completion(svc, a))

    def model_card() -> dict[str, Any]:
        return {"id": svc.name, "object": "model", "created": svc.started_at, "owned_by": "ragcost"}

    async def models(request: Request, call: Call) -> Response:
        _tenant(svc, request, call)
        return JSONResponse({"object": "list", "data": [model_card()]})

    async def model(request: Request, call: Call) -> Response:
        _tenant(svc, request, call)
        name = request.path_params["name"]
        if name != svc.name:
            raise HTTPError(404, f"model {name!r} is not served here; this server serves {svc.name!r}", "model",
                            code="model_not_found")
        return JSONResponse(model_card())

    async def healthz(request: Request, call: Call) -> Response:
        return JSONResponse({"ok": True})

    async def readyz(request: Request, call: Call) -> Response:
        return JSONResponse({"ready": svc.ready}, status_code=200 if svc.ready else 503)

    async def metrics(request: Request, call: Call) -> Response:
        token = svc.metrics_token
        if token is not None and not hmac.compare_digest((_bearer(request) or "").encode(), token.encode()):
            raise HTTPError(401, "/metrics needs Authorization: Bearer TOKEN (serve.metrics_key)", code="invalid_api_key")
        svc.metrics.queue_depth.set(svc.batcher.depth)
        svc.metrics.in_flight.set(svc.batcher.ahead())
        svc.metrics.service_rate.set(svc.batcher.rate() or 0.0)
        svc.metrics.predicted_wait.set(svc.batcher.predicted_s() or 0.0)
        body, ctype = svc.metrics.render()
        return Response(body, media_type=ctype)

    async def not_routed(request: Request, exc: StarletteHTTPException) -> Response:
        err = HTTPError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}; "
                        f"routes: {', '.join(ROUTES)}", code="not_found" if exc.status_code == 404 else "method_not_allowed")
        path = request.url.path if request.url.path in ROUTES else "other"
        svc.metrics.request(path, exc.status_code, None, err.outcome)
        call = Call(path, request.method, request.headers)
        call.outcome = err.outcome
        _span(svc, call, exc.status_code)
        return err.response()

    app = Starlette(routes=[
        route("/v1/query", query, ["POST"]),
        route("/v1/chat/completions", chat, ["POST"]),
        route("/v1/models", models, ["GET"]),
        Route("/v1/models/{name}", route("/v1/models", model, ["GET"]).endpoint, methods=["GET"]),
        route("/healthz", healthz, ["GET"]), route("/readyz", readyz, ["GET"]), route("/metrics", metrics, ["GET"]),
    ], lifespan=lifespan, exception_handlers={StarletteHTTPException: not_routed},
       middleware=[Middleware(CORS, origins=svc.config.cors_origins)] if svc.config.cors_origins else None)
    app.state.service = svc
    return app


def _span(svc: Service, call: Call, status: int) -> None:
    """The request's server span, when tracing is on; a tracing failure never fails the request."""
    if svc.spans is None:
        return
    try:
        svc.spans.emit(call, status, call.headers)
    except Exception as e:
        log.warning("%s %s: its span was not emitted (%s: %s)", call.method, call.route, type(e).__name__, e)


def _completion(svc: Service, a: Answer) -> dict[str, Any]:
    if blocked(a):
        content, finish = svc.config.refusal, "content_filter"
    else:
        content, finish = a.answer or "", _finish_reason(a)
    return {"id": f"chatcmpl-{a.id}", "object": "chat.completion", "created": int(time.time()), "model": svc.name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content, "refusal": None},
                         "logprobs": None, "finish_reason": finish}],
            "usage": _usage(svc, a, content), "ragcost": public_json(a)}


def _finish_reason(a: Answer) -> str:
    return a.generation.get("finish_reason") or "stop"


def _chunk(t: Ticket, name: str, delta: dict, finish: Optional[str] = None, usage: Optional[dict] = None) -> str:
    body = {"id": f"chatcmpl-{t.state.id}", "object": "chat.completion.chunk", "created": int(time.time()), "model": name,
            "choices": [] if usage is not None else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
    if usage is not None:
        body["usage"] = usage
    return f"data: {json.dumps(body)}\n\n"


def _error_event(err: HTTPError) -> str:
    return f"data: {json.dumps(err.body())}\n\n"


async def _sse(svc: Service, t: Ticket, include_usage: bool, call: Call) -> AsyncIterator[str]:
    """Pieces as generation streams them; the rows are committed before the last chunk is sent.

    When a guard on the answer may block or rewrite it (``svc.hold_stream``), nothing of the text
    leaves unchecked: with a sentence gate (:mod:`ragcost.serve.gate`) each sentence leaves once the
    blocking checks passed it, else the whole answer waits for the guard; then the rest of the
    guarded answer is sent, or the refusal."""
    waiter = getter = None
    sent = ""  # the held stream's text the gate released
    call.outcome = "error"
    try:
        yield _chunk(t, svc.name, {"role": "assistant", "content": ""})
        waiter = asyncio.ensure_future(asyncio.shield(t.answer))
        while True:
            getter = asyncio.ensure_future(t.events.get())
            done, _ = await asyncio.wait({getter, waiter}, timeout=max(0.0, t.deadline - time.monotonic()),
                                         return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                kind, piece = getter.result()
                if kind == ("released" if svc.hold_stream else "text"):
                    sent += piece if svc.hold_stream else ""
                    yield _chunk(t, svc.name, {"content": piece})
                continue
            getter.cancel()
            if not done:
                svc.abandon(t, DEADLINE)
                call.outcome = "deadline"
                yield _error_event(_late(svc))
                return
            break
        while not t.events.empty():  # pieces that arrived with the answer
            kind, piece = t.events.get_nowait()
            if kind == ("released" if svc.hold_stream else "text"):
                sent += piece if svc.hold_stream else ""
                yield _chunk(t, svc.name, {"content": piece})
        a = call.answer = waiter.result()
        try:
            await svc.commit(t, a)
        except Exception as e:
            err = from_exception(e, "POST /v1/chat/completions (stream)")
            call.outcome = err.outcome
            yield _error_event(err)
            return
        if a.error == DEADLINE:
            call.outcome = "deadline"
            yield _error_event(_late(svc))
        elif blocked(a):
            call.outcome = "blocked"
            yield _chunk(t, svc.name, {"content": svc.config.refusal})
            yield _chunk(t, svc.name, {}, "content_filter")
        elif not a.ok:
            call.outcome = "failed"
            yield _error_event(HTTPError(502, a.error or "the query failed", code="pipeline_failed"))
        else:
            call.outcome = "ok"
            if svc.hold_stream and a.answer:
                rest = a.answer[len(sent):] if a.answer.startswith(sent) else ""  # released text is always its prefix
                if rest:
                    yield _chunk(t, svc.name, {"content": rest})
            yield _chunk(t, svc.name, {}, _finish_reason(a))
        if include_usage and call.outcome in ("ok", "blocked"):
            yield _chunk(t, svc.name, {}, usage=_usage(svc, a, svc.config.refusal if blocked(a) else (a.answer or "")))
        yield "data: [DONE]\n\n"
    except asyncio.CancelledError:
        call.outcome = "disconnected"
        raise
    finally:
        for f in (getter, waiter):
            if f is not None and not f.done():
                f.cancel()
        if not t.recorded:  # the client went away (the response was cancelled) before the end
            svc.abandon(t, DISCONNECTED)
            call.outcome = "disconnected"
        svc.metrics.request(call.route, 200, call.tenant, call.outcome, time.monotonic() - call.t0)
        _span(svc, call, 200)
