"""The typed errors a service's core raises when it will not carry out a request, by what the caller can do about it
(the way gRPC's canonical codes are): the core says *why*, the HTTP edge alone decides the status
(`fa_common.http_errors.http_error`, the one mapping). No module outside an HTTP edge raises `HttpError`.

Each carries the message the client reads, an optional machine-readable `detail` (a 422's `[{"field", "message"}]`)
and, where trying again later may succeed, `retry_after_s`.
"""

from __future__ import annotations

from typing import Any


class RequestError(Exception):
    """A request refused; subclasses say how."""

    def __init__(self, message: str, detail: Any = None, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        self.retry_after_s = retry_after_s


class Malformed(RequestError):
    """The request cannot be read as sent (bytes that do not decode, a message of the wrong shape)."""


class Unauthenticated(RequestError):
    """Who sent the request is not established: credentials missing, unknown, replayed or not verifying."""


class Forbidden(RequestError):
    """The caller is known but may not do this."""


class NotFound(RequestError):
    """What the request names does not exist (here)."""


class Conflict(RequestError):
    """The request does not fit the current state (another message already sent, a phase not open)."""


class Gone(RequestError):
    """What the request is about has ended for this caller and will not come back (a cohort aborted, a party
    dropped)."""


class Invalid(RequestError):
    """Well-formed, but its content is refused; `detail` names the fields."""


class RateLimited(RequestError):
    """Too many requests from this caller; `retry_after_s` says when to try again."""


class Unavailable(RequestError):
    """The service cannot take the request now (busy, its store failing); `retry_after_s` says when to try again."""


__all__ = ["Conflict", "Forbidden", "Gone", "Invalid", "Malformed", "NotFound", "RateLimited", "RequestError",
           "Unauthenticated", "Unavailable"]
