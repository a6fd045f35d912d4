"""Typed HTTP errors: raised anywhere in a handler, rendered as JSON `{"error", "detail"?}` by the middleware."""

from __future__ import annotations

from typing import Any


class HttpError(Exception):
    def __init__(self, status: int, message: str, detail: Any = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.detail = detail
        self.headers = headers or {}
