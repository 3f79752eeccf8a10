"""A real HTTP server on 127.0.0.1 that speaks just enough of the OpenAI streaming protocol to misbehave.

Each request takes the next behaviour from a script: ``ok`` (a full stream with usage),
``503``/``429``/``400`` (an HTTP error), ``cut`` (two content chunks, then the connection is
closed without [DONE]), ``garbage`` (a chunk that is not JSON), ``slow`` (sleeps past the client's
deadline), ``nousage`` (a full stream without a usage chunk), ``long`` (a full stream, 0.1 s between
chunks instead of 0.01 s). When the script runs out, ``ok``.
Bounded: it serves at most ``max_requests`` requests and stops with the test.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Optional

WORDS = ["alpha", " beta", " gamma", " delta", " [1]"]


class FaultServer:
    def __init__(self, script: list[str] | None = None, max_requests: int = 200, cached: Optional[int] = None):
        self.script = list(script or [])
        self.max_requests = max_requests
        self.cached = cached
        self.requests: list[dict] = []
        self.headers: list[dict[str, str]] = []  # each request's header fields, names in lower case
        self.port = 0
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._server = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> "FaultServer":
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fault server did not start")
        return self

    def __exit__(self, *exc) -> None:
        if self._loop is not None:
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        self._thread.join(10)

    async def _shutdown(self) -> None:
        self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        asyncio.get_running_loop().stop()

    def _main(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:  # keep-alive: several requests per connection
                head = await reader.readuntil(b"\r\n\r\n")
                fields = dict(line.split(":", 1) for line in head.decode().split("\r\n")[1:] if ":" in line)
                fields = {k.strip().lower(): v.strip() for k, v in fields.items()}
                length = int(fields.get("content-length", 0))
                body = json.loads(await reader.readexactly(length)) if length else {}
                if len(self.requests) >= self.max_requests:
                    break
                self.requests.append(body)
                self.headers.append(fields)
                what = self.script.pop(0) if self.script else "ok"
                if not await self._respond(what, body, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _respond(self, what: str, body: dict, writer: asyncio.StreamWriter) -> bool:
        if what.isdigit():
            msg = json.dumps({"error": {"message": f"scripted {what}"}}).encode()
            writer.write(f"HTTP/1.1 {what} Err\r\nContent-Type: application/json\r\nContent-Length: {len(msg)}\r\n\r\n".encode() + msg)
            await writer.drain()
            return True
        if what == "slow":
            await asyncio.sleep(5)
            return False
        chat = "messages" in body
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")

        async def event(data: str) -> None:
            payload = f"data: {data}\n\n".encode()
            writer.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
            await writer.drain()
            await asyncio.sleep(0.1 if what == "long" else 0.01)

        n = min(len(WORDS), int(body.get("max_tokens", 5)))
        for i, w in enumerate(WORDS[:n]):
            choice = {"index": 0, "delta": {"content": w}} if chat else {"index": 0, "text": w}
            await event(json.dumps({"id": "x", "choices": [choice]}))
            if what == "cut" and i == 1:
                return False  # close the socket mid-stream
            if what == "garbage" and i == 1:
                await event("{not json")
        if what != "nousage":
            usage = {"prompt_tokens": 11, "completion_tokens": n, "total_tokens": 11 + n}
            if self.cached is not None:
                usage["prompt_tokens_details"] = {"cached_tokens": self.cached}
            await event(json.dumps({"id": "x", "choices": [], "usage": usage}))
        await event("[DONE]")
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True


def closed_port() -> int:
    """A 127.0.0.1 port with nothing listening (bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
