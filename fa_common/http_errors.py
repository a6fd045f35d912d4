"""The HTTP edge's errors: `HttpError`, an answer other than 200 that a route raises and the service's error
middleware renders as JSON `{"error": message, "detail"?: ...}`, and `http_error`, the one mapping of the core's typed
errors (`fa_common.errors`) to status codes. No aiohttp here: the server and the issuer each render it."""

from __future__ import annotations

from typing import Any

from fa_common.errors import (
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    Malformed,
    NotFound,
    RateLimited,
    RequestError,
    Unauthenticated,
    Unavailable,
)
from fa_common.ratelimit import retry_after_header


class HttpError(Exception):
    """An answer other than 200, raised at the HTTP edge only."""

    def __init__(self, status: int, message: str, detail: Any = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.detail = detail
        self.headers = headers or {}


STATUS: dict[type[RequestError], int] = {
    Malformed: 400,
    Unauthenticated: 401,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    Gone: 410,
    Invalid: 422,
    RateLimited: 429,
    Unavailable: 503,
}
"""The status of each kind of refusal; a subclass answers as its nearest listed base."""


def http_error(exc: RequestError) -> HttpError:
    """The answer to a request the core refused: its status by type, its message and detail, and `Retry-After` when
    the core said when to try again."""
    status = 500
    for cls in type(exc).__mro__:
        if issubclass(cls, RequestError) and cls in STATUS:
            status = STATUS[cls]
            break
    headers = {} if exc.retry_after_s is None else {"Retry-After": retry_after_header(exc.retry_after_s)}
    return HttpError(status, exc.message, exc.detail, headers)


__all__ = ["STATUS", "HttpError", "http_error"]
