"""Opt-in CORS (``serve.cors_origins``): browsers on the listed origins may call the server; any other origin is
refused before anything runs.

A cross-origin browser request with a key is preflighted (OPTIONS); one without (a text/plain POST to an
open server) is not, and a browser would still send it and merely hide the answer. So a request whose
``Origin`` is not listed is a 403 with OpenAI's error object, never run, billed or cached. Requests without
an ``Origin`` header (curl, SDKs, servers) are untouched; with no ``cors_origins`` nothing here runs at all.
"""

from __future__ import annotations

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ragcost.serve.errors import HTTPError

METHODS = "GET, POST, OPTIONS"
HEADERS = "authorization, content-type"
MAX_AGE_S = 600


class CORS:
    def __init__(self, app: ASGIApp, origins: list[str]) -> None:
        self.app, self.origins, self.any = app, frozenset(o.lower() for o in origins), "*" in origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        if origin is None:
            return await self.app(scope, receive, send)
        if not (self.any or origin.lower() in self.origins):
            err = HTTPError(403, f"origin {origin[:100]!r} is not allowed to call this server; add it to the pipeline's "
                            "serve.cors_origins", code="origin_not_allowed", headers={"Vary": "Origin", "Connection": "close"})
            return await err.response()(scope, receive, send)
        allow = {"Access-Control-Allow-Origin": origin, "Vary": "Origin"}
        if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:  # a preflight: answered here
            return await Response(status_code=204, headers={**allow, "Access-Control-Allow-Methods": METHODS,
                                                            "Access-Control-Allow-Headers": HEADERS,
                                                            "Access-Control-Max-Age": str(MAX_AGE_S)})(scope, receive, send)

        async def send_allowed(message: Message) -> None:
            if message["type"] == "http.response.start":
                h = MutableHeaders(scope=message)
                h["Access-Control-Allow-Origin"] = origin
                h.append("Vary", "Origin")
            await send(message)

        await self.app(scope, receive, send_allowed)
