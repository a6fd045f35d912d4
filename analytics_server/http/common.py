"""Request parsing, response rendering and error rendering shared by all routes: never a 5xx for bad input.

`read_body` enforces size (413), `parse_json_body` content type (415) and syntax (400), `parse_model` the
pydantic model (422, message naming the field path); `json_model` renders a pydantic model and
`app_state` gives a route the process's shared objects. The middleware renders `HttpError`s and aiohttp's
own HTTP exceptions as JSON `{"error": ...}`; anything else is a server bug and is logged as such.
"""

from __future__ import annotations

import json
import logging
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from analytics_server.errors import HttpError
from analytics_server.state import STATE, AppState

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)


def app_state(request: web.Request) -> AppState:
    return request.app[STATE]


def json_model(
    model: BaseModel, status: int = 200, headers: dict[str, str] | None = None, exclude_none: bool = False
) -> web.Response:
    """A pydantic model as a JSON response (`exclude_none` drops unset optional fields, as the device API does)."""
    return web.json_response(model.model_dump(mode="json", exclude_none=exclude_none), status=status, headers=headers)


def error_json(status: int, message: str, detail: Any = None, headers: dict[str, str] | None = None) -> web.Response:
    body: dict[str, Any] = {"error": message}
    if detail is not None:
        body["detail"] = detail
    return web.json_response(body, status=status, headers=headers)


def validation_message(exc: ValidationError, prefix: str = "") -> tuple[str, list[dict[str, Any]]]:
    details = []
    parts = []
    for err in exc.errors(include_url=False, include_input=False):
        loc = ".".join(str(x) for x in ((prefix,) if prefix else ()) + tuple(err["loc"]))
        details.append({"field": loc, "message": err["msg"]})
        parts.append(f"{loc or 'body'}: {err['msg']}")
    return "; ".join(parts), details


def parse_model(model: type[M], data: Any, prefix: str = "") -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        msg, details = validation_message(exc, prefix)
        raise HttpError(422, msg, details) from None


async def read_body(request: web.Request, limit: int) -> bytes:
    if request.content_length is not None and request.content_length > limit:
        raise HttpError(413, f"request body of {request.content_length} bytes exceeds the limit of {limit} bytes")
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise HttpError(413, f"request body exceeds the limit of {limit} bytes") from None
    if len(body) > limit:
        raise HttpError(413, f"request body of {len(body)} bytes exceeds the limit of {limit} bytes")
    return body


def parse_json_body(request: web.Request, body: bytes) -> Any:
    ctype = request.content_type
    if ctype != "application/json":
        raise HttpError(415, f"Content-Type must be application/json, got {ctype or 'none'}")
    if not body:
        raise HttpError(400, "empty body: expected a JSON object")
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HttpError(400, f"malformed JSON: {exc}") from None


def route_class(request: web.Request) -> str:
    path = request.path
    if path.startswith("/v1/device"):
        return "device"
    if path.startswith("/v1/"):
        return "analyst"
    return "other"


def make_error_middleware(metrics: Any) -> Any:
    @web.middleware
    async def errors(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            resp = await handler(request)
        except HttpError as exc:
            resp = error_json(exc.status, exc.message, exc.detail, exc.headers)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            msg = {
                404: f"no route {request.method} {request.path}",
                405: f"method {request.method} not allowed on {request.path}",
                413: "request body exceeds the size limit",
            }.get(exc.status, exc.reason)
            resp = error_json(exc.status, msg)
        except Exception:
            log.exception("unhandled error on %s %s", request.method, request.path)
            resp = error_json(500, "internal server error")
        metrics.http_responses[(route_class(request), resp.status)] += 1
        return resp

    return errors
