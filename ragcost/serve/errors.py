"""OpenAI's error object on every error: ``{"error": {"message", "type", "param", "code"}}``.

Any exception reaching a route becomes one: an :class:`HTTPError` as raised, a ragcost library
error (bad query text, an unknown filter field, ...) a 400 naming what to fix, a full disk a 503,
anything else a 500 whose body names the exception's type only (the server log has one line).
"""

from __future__ import annotations

import errno
import logging
from typing import Optional

from ragcost.urls import hide_passwords

from starlette.responses import JSONResponse

from ragcost.errors import RagcostError

log = logging.getLogger("ragcost.serve")

TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
         405: "invalid_request_error", 408: "timeout", 413: "invalid_request_error", 415: "invalid_request_error",
         429: "rate_limit_error",
         499: "client_disconnected", 502: "server_error", 503: "service_unavailable", 504: "timeout"}
# Phrases the storage engines use when the disk is full (DuckDB and PostgreSQL wrap the OS error in their own).
DISK_FULL = ("no space left on device", "disk is full", "could not extend file", "database or disk is full")


class HTTPError(Exception):
    def __init__(self, status: int, message: str, param: Optional[str] = None, headers: Optional[dict] = None,
                 code: Optional[str] = None, outcome: Optional[str] = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.headers, self.code = status, message, param, headers or {}, code
        self.outcome = outcome or outcome_of(status)

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": TYPES.get(self.status, "server_error"),
                          "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def outcome_of(status: int) -> str:
    """The metrics' outcome label of a status (a bounded set)."""
    if status < 400:
        return "ok"
    return {401: "unauthorized", 408: "timeout", 429: "overloaded", 499: "disconnected", 504: "deadline",
            503: "unavailable"}.get(status, "refused" if status < 500 else "error")


def disk_full(e: BaseException) -> bool:
    """Whether ``e`` (or what it wraps: SQLAlchemy's ``orig``, a cause or context) is a full disk."""
    seen: set[int] = set()
    todo: list[Optional[BaseException]] = [e]
    while todo:
        x = todo.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, OSError) and x.errno == errno.ENOSPC:
            return True
        if any(p in str(x).lower() for p in DISK_FULL):
            return True
        todo += [getattr(x, "orig", None), x.__cause__, x.__context__]
    return False


def from_exception(e: BaseException, where: str) -> HTTPError:
    """The error object for an exception a route did not expect to handle itself."""
    if isinstance(e, HTTPError):
        return e
    if disk_full(e):
        log.error("%s: the ledger could not be written: the disk is full (%s); free space, the server goes on", where,
                  type(e).__name__)
        return HTTPError(503, "the server's storage is full, so this request could not be recorded; retry later",
                         headers={"Retry-After": "30"}, code="storage_full")
    if isinstance(e, RagcostError):  # the library refused the request's input: the caller's to fix
        return HTTPError(400, hide_passwords(str(e).splitlines()[0]) if str(e) else type(e).__name__, code="invalid_value")
    log.error("%s: %s: %s", where, type(e).__name__, hide_passwords(str(e).splitlines()[0]) if str(e) else "")
    return HTTPError(500, f"internal error ({type(e).__name__}); the server log has one line about it", code="internal_error")
