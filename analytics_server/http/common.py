"""Request parsing, response rendering and error rendering shared by all routes: never a 5xx for bad input.

`read_body` streams a body up to the route's limit (413 as soon as it is exceeded, also for chunked
uploads without Content-Length; 408 when it does not arrive within the app's body-read deadline);
`parse_json_body` enforces content type (415), syntax and nesting depth (400); `parse_model` the pydantic
model (422, message naming the field path). The middleware renders `HttpError`s, the core's typed refusals
(`fa_common.errors`, by `fa_common.http_errors.http_error`: the one place their statuses are decided) and aiohttp's own
HTTP exceptions as JSON `{"error": ...}` (405 with `Allow`); anything else is a server bug and is logged as such. `json_model` renders a
pydantic model and `app_state` gives a route the process's shared objects.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from typing import Any, TypeVar

import numpy as np
from aiohttp import web
from aiohttp.typedefs import Handler
from pydantic import BaseModel, ValidationError

from analytics_server.state import STATE, AppState
from fa_common.errors import RequestError
from fa_common.http_errors import HttpError, http_error
from queries.field_hints import validation_message

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)
BODY_READ_TIMEOUT = web.AppKey("body_read_timeout_s", float)
"""Seconds a request body may take to arrive (set by create_app from the settings)."""
DEFAULT_BODY_READ_TIMEOUT_S = 30.0
MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays/objects accepted in a JSON body (the specs need fewer than ten)."""
MAX_JSON_CONTAINERS = 10_000
"""Most arrays/objects accepted in one JSON body (a spec at its size limits has a few hundred). Parsing
hundreds of thousands of small containers holds the interpreter for about a second, stalling the server."""
_JSON_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"?', re.DOTALL)
"""A JSON string literal, possibly unterminated; possessive, so matching is linear in the body length."""
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")


def app_state(request: web.Request) -> AppState:
    return request.app[STATE]


def json_model(
    model: BaseModel, status: int = 200, headers: dict[str, str] | None = None, exclude_none: bool = False
) -> web.Response:
    """A pydantic model as a JSON response (`exclude_none` drops unset optional fields, as the device API does),
    serialised by pydantic-core without an intermediate dict."""
    return web.Response(body=model.model_dump_json(exclude_none=exclude_none), status=status, headers=headers,
                        content_type="application/json")


def error_json(status: int, message: str, detail: Any = None, headers: dict[str, str] | None = None) -> web.Response:
    body: dict[str, Any] = {"error": message}
    if detail is not None:
        body["detail"] = detail
    return web.json_response(body, status=status, headers=headers)


def parse_model(model: type[M], data: Any, prefix: str = "") -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        msg, details = validation_message(exc, prefix, model)
        raise HttpError(422, msg, details) from None


async def read_body(request: web.Request, limit: int) -> bytes:
    """The request body, read as it streams in: 413 once it exceeds `limit` (a declared Content-Length
    is refused before anything is read), 408 when it has not fully arrived within the body-read deadline."""
    if request.content_length is not None and request.content_length > limit:
        raise HttpError(413, f"request body of {request.content_length} bytes exceeds the limit of {limit} bytes")
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise HttpError(415, f"Content-Encoding {encoding[:40]!r} is not accepted; send the body uncompressed")
    timeout = request.app.get(BODY_READ_TIMEOUT, DEFAULT_BODY_READ_TIMEOUT_S)
    body = bytearray()
    try:
        if request.content.is_eof():  # it all arrived with the head (most device requests): no deadline to arm
            body += await request.content.read()
        else:
            async with asyncio.timeout(timeout):
                while chunk := await request.content.readany():
                    if len(body) + len(chunk) > limit:
                        raise HttpError(413, f"request body exceeds the limit of {limit} bytes")
                    body += chunk
    except TimeoutError:
        raise HttpError(408, f"request body not received within {timeout:g} s") from None
    except web.RequestPayloadError as exc:
        raise HttpError(400, f"malformed request body: {exc}") from None
    if len(body) > limit:
        raise HttpError(413, f"request body exceeds the limit of {limit} bytes")
    return bytes(body)


def json_shape(body: bytes) -> tuple[int, int]:
    """(deepest nesting, number of arrays and objects) of a JSON text, ignoring brackets inside strings; linear
    time, so it runs before the parser on any body."""
    brackets = _JSON_STRING.sub(b"", body).translate(None, _NOT_BRACKETS)
    if not brackets:
        return 0, 0
    arr = np.frombuffer(brackets, dtype=np.uint8)
    opens = (arr == ord("[")) | (arr == ord("{"))
    steps = np.where(opens, 1, -1)
    return int(np.cumsum(steps).max()), int(opens.sum())


def parse_json_body(request: web.Request, body: bytes) -> Any:
    ctype = request.content_type
    if ctype != "application/json":
        raise HttpError(415, f"Content-Type must be application/json, got {ctype or 'none'}")
    if not body:
        raise HttpError(400, "empty body: expected a JSON object")
    depth, containers = json_shape(body)
    if depth > MAX_JSON_DEPTH:
        raise HttpError(400, f"malformed JSON: nested {depth} levels deep; at most {MAX_JSON_DEPTH} are accepted")
    if containers > MAX_JSON_CONTAINERS:
        raise HttpError(400, f"JSON body too complex: {containers} arrays/objects; at most {MAX_JSON_CONTAINERS} "
                             "are accepted")
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HttpError(400, f"malformed JSON: {exc}") from None
    except (RecursionError, ValueError) as exc:
        raise HttpError(400, f"malformed JSON: {type(exc).__name__}") from None


def route_class(request: web.Request) -> str:
    path = request.path
    if path.startswith("/v1/device"):
        return "device"
    if path.startswith("/v1/"):
        return "analyst"
    return "other"


def make_error_middleware(metrics: Any) -> Any:
    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            resp = await handler(request)
        except (HttpError, RequestError) as exc:
            answer = http_error(exc) if isinstance(exc, RequestError) else exc
            resp = error_json(answer.status, answer.message, answer.detail, answer.headers)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            msg = {
                404: f"no route {request.method} {request.path[:200]}",
                405: f"method {request.method} not allowed on {request.path[:200]}",
                413: "request body exceeds the size limit",
            }.get(exc.status, exc.reason)
            allow = exc.headers.get("Allow")
            resp = error_json(exc.status, msg, headers={"Allow": allow} if allow is not None else None)
        except ConnectionResetError:  # the client went away while its answer was being written (aiohttp's
            # ClientConnectionResetError is one): not a server error; writing this answer fails too, and aiohttp drops
            # such a connection quietly ("premature client disconnection")
            log.debug("client disconnected during %s %s", request.method, request.path)
            resp = error_json(400, "client disconnected")
        except Exception:
            log.exception("unhandled error on %s %s", request.method, request.path)
            resp = error_json(500, "internal server error")
        metrics.http_responses[(route_class(request), resp.status)] += 1
        return resp

    return errors
