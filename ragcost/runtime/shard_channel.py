"""A shard actor's direct channel: searches over one persistent TCP socket per shard, not Ray calls.

Why: a Ray actor call costs this 2-core box about 1-2 ms of scheduling and serialisation (four
calls with no work: ``noop_fanout`` in ``bench/shard_actors.py``), several times what searching a
25k-vector HNSW shard takes, so a single query fanned out through Ray was ~10x slower than
walking the four shards in one process. Ray still places, starts, restarts and kills the actors and
carries the retry after a fault; only the search itself goes straight to the actor.

The actor listens on its node's address (``ray.util.get_node_ip_address()``), port chosen by the
kernel, and accepts a connection only after it sends the token the driver gave the actor when it
asked for the endpoint (a random 32 bytes per served index), so another process on the network
cannot search the shard. Nothing is unpickled: a frame is a 4-byte length, a JSON header naming
its arrays (dtype, shape) and their raw bytes, back to back::

    request  {"op": "search"|"scan", "k": 10, "params": {...}|null, "arrays": [["queries", "<f4", [n, d]],
              ["allowed", "<i8", [m]]]}
    reply    {"cpu_seconds", "wall_seconds", "node", "pid", "arrays": [scores, labels, exact_rows]}
             or {"error": "..."}

A connection serves one request at a time (the driver sends the request to every shard, then reads
the replies, so the shards search in parallel). Any socket error, timeout or error reply closes that
connection: a reply that might still arrive could never be matched to the next request.
"""

from __future__ import annotations

import hmac
import json
import socket
import struct
import threading
from typing import Any, Callable, Optional

import numpy as np

_LENS = struct.Struct(">II")  # a frame: header length, arrays length
MAX_FRAME = 1 << 31  # a frame's header + arrays; a larger one is refused, never allocated
HELLO_LIMIT = 4096  # the first frame of a connection, the token's: an unauthenticated peer gets no more


class ChannelError(Exception):
    """The channel to one shard failed: the caller asks that shard through Ray instead."""


class ChannelUnreachable(ChannelError):
    """The shard's endpoint could not be connected to (a firewall, a dead actor's closed port)."""


def encode(header: dict, arrays: list[tuple[str, np.ndarray]]) -> bytes:
    header = {**header, "arrays": [[name, a.dtype.str, list(a.shape)] for name, a in arrays]}
    head = json.dumps(header, separators=(",", ":")).encode()
    body = b"".join(np.ascontiguousarray(a).tobytes() for _, a in arrays)
    return _LENS.pack(len(head), len(body)) + head + body


def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        r = sock.recv_into(view[got:], n - got)
        if not r:
            raise ChannelError("the shard closed the connection")
        got += r
    return buf


def read_frame(sock: socket.socket, limit: int = MAX_FRAME) -> tuple[dict, dict[str, np.ndarray]]:
    hl, bl = _LENS.unpack(_recv_exact(sock, 8))  # two reads a frame: the lengths, then header and arrays
    if hl + bl > limit:
        raise ChannelError(f"a frame of {hl + bl} bytes is over the {limit} allowed")
    data = _recv_exact(sock, hl + bl)  # writable: the arrays are views of it
    header = json.loads(bytes(data[:hl]))
    if not isinstance(header, dict):
        raise ChannelError("a frame's header is not a JSON object")
    body = memoryview(data)[hl:]
    arrays, at = {}, 0
    for name, dtype, shape in header.pop("arrays", []):
        dt = np.dtype(dtype)
        if dt.kind not in "fiu":
            raise ChannelError(f"array {name!r} of dtype {dtype!r}: only numbers travel on the channel")
        size = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if at + size > len(body):
            raise ChannelError(f"array {name!r} runs past the frame's {len(body)} bytes")
        arrays[name] = np.frombuffer(body, dt, count=size // dt.itemsize, offset=at).reshape(shape)
        at += size
    return header, arrays


class ChannelServer:
    """The actor's side: a listening socket and one thread per connection, answering with ``handle``."""

    def __init__(self, host: str, token: bytes, handle: Callable[[str, dict, dict], dict]) -> None:
        self.token, self.handle = token, handle
        self.sock = socket.create_server((host, 0))
        self.address = (host, self.sock.getsockname()[1])
        threading.Thread(target=self._accept, name="ragcost-shard-channel", daemon=True).start()

    def close(self) -> None:
        """Stop listening (a shutdown wakes the accept; a bare close would leave it blocked, still listening)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), name="ragcost-shard-conn", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            conn.settimeout(10)
            hello, _ = read_frame(conn, HELLO_LIMIT)  # before the token, nothing large is read
            if not hmac.compare_digest(str(hello.get("token", "")).encode(), self.token):
                return
            conn.settimeout(None)
            while True:
                header, arrays = read_frame(conn)
                try:
                    out = self.handle(str(header.get("op")), header, arrays)
                    reply = encode({k: v for k, v in out.items() if not isinstance(v, np.ndarray)},
                                   [(k, v) for k, v in out.items() if isinstance(v, np.ndarray)])
                except Exception as e:  # noqa: BLE001 -- sent back whole: the driver records it
                    reply = encode({"error": f"{type(e).__name__}: {e}"[:500]}, [])
                conn.sendall(reply)
        except (ChannelError, OSError, ValueError):
            return
        finally:
            conn.close()


class ChannelClient:
    """The driver's side of one shard: a connection opened on first use, closed on any failure."""

    def __init__(self, address: tuple[str, int], token: bytes, connect_timeout_s: float) -> None:
        self.address, self.token, self.connect_timeout_s = address, token, connect_timeout_s
        self.sock: Optional[socket.socket] = None

    def send(self, header: dict, arrays: list[tuple[str, np.ndarray]]) -> None:
        try:
            if self.sock is None:
                try:
                    s = socket.create_connection(self.address, timeout=self.connect_timeout_s)
                except OSError as e:
                    raise ChannelUnreachable(f"{self.address[0]}:{self.address[1]}: {type(e).__name__}: {e}") from None
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                s.sendall(encode({"token": self.token.decode()}, []))
                self.sock = s
            self.sock.sendall(encode(header, arrays))
        except OSError as e:
            self.close()
            raise ChannelError(f"{type(e).__name__}: {e}") from None

    def receive(self, timeout_s: float) -> dict[str, Any]:
        if self.sock is None:
            raise ChannelError("not connected")
        try:
            self.sock.settimeout(max(timeout_s, 0.001))
            header, arrays = read_frame(self.sock)
        except (OSError, ChannelError, ValueError) as e:
            self.close()
            raise ChannelError(f"{type(e).__name__}: {e}") from None
        if "error" in header:
            self.close()
            raise ChannelError(str(header["error"]))
        return {**header, **arrays}

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None
