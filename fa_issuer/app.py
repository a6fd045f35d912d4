"""The issuer's HTTP service (aiohttp): `GET /v1/issuer/keys`, `POST /v1/issuer/token`, `GET /healthz`.

A token request is checked in this order, each step answering with its own status (docs/issuer.md):
the client address's rate (429), the body (413 over 4 KiB, 408 not received within 30 s, 415 not JSON, 400 malformed JSON, 422 a field
that does not parse, named), the `token_key_id` (404), the credential (403, with the attester's reason), the
install's quota (429 naming it, with `Retry-After`); then the blinded message is signed on a worker thread.
Every refusal is one log line; bad input never gets a 5xx.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from fa_issuer.attesters import Attester, CredentialRefused
from fa_issuer.keys import IssuerKey
from fa_issuer.quota import QuotaStore
from fa_issuer.settings import BODY_LIMIT
from fa_common.b64 import b64d, b64e
from fa_common.clock import SYSTEM_CLOCK, Clock
from fa_common.http_errors import HttpError
from fa_common.ratelimit import AddressRateLimiter, retry_after_header
from secagg import blind_rsa, identity_token

log = logging.getLogger("fa_issuer")
TOKEN_TYPE = identity_token.TOKEN_TYPE
BLINDED_MSG_BYTES = blind_rsa.MODULUS_BITS // 8
PRUNE_EVERY_S = 3600.0
BODY_READ_TIMEOUT_S = 30.0
"""A request body must arrive within this (else 408): a slow sender does not hold a connection open for long."""
FIELDS = ("credential", "token_key_id", "blinded_msg")


def field_error(name: str, message: str) -> HttpError:
    return HttpError(422, f"{name}: {message}", [{"field": name, "message": message}])


@dataclass
class Issuer:
    """What the service runs on: its keys (by token_key_id), the attester, the quota records, the address limiter
    (None: no limit) and the wall clock (the quota's time)."""

    keys: dict[bytes, IssuerKey]
    attester: Attester
    quota: QuotaStore
    limiter: AddressRateLimiter | None = None
    clock: Clock = SYSTEM_CLOCK
    refusals: dict[int, int] = field(default_factory=dict)

    @classmethod
    def with_key(cls, key: IssuerKey, attester: Attester, quota: QuotaStore, limiter: AddressRateLimiter | None = None,
                 clock: Clock = SYSTEM_CLOCK) -> Issuer:
        return cls({key.token_key_id: key}, attester, quota, limiter, clock)


ISSUER = web.AppKey("issuer", Issuer)


def _decode_field(body: dict[str, Any], name: str, length: int) -> bytes:
    value = body.get(name)
    if value is None:
        raise field_error(name, "missing")
    if not isinstance(value, str):
        raise field_error(name, f"must be a base64 string, got {type(value).__name__}")
    if len(value) > 4 * ((length + 2) // 3):
        raise field_error(name, f"expected {length} bytes")
    try:
        return b64d(value, name, length)
    except ValueError as exc:
        raise field_error(name, str(exc).removeprefix(f"{name}: ")) from None


async def _json_body(request: web.Request) -> dict[str, Any]:
    if request.content_type != "application/json":
        raise HttpError(415, f"Content-Type must be application/json, got {request.content_type or 'none'}")
    if request.content_length is not None and request.content_length > BODY_LIMIT:
        raise HttpError(413, f"request body of {request.content_length} bytes exceeds the limit of {BODY_LIMIT} bytes")
    try:
        async with asyncio.timeout(BODY_READ_TIMEOUT_S):
            raw = await request.read()
    except TimeoutError:
        raise HttpError(408, f"request body not received within {BODY_READ_TIMEOUT_S:g} s") from None
    except web.HTTPRequestEntityTooLarge:
        raise HttpError(413, f"request body exceeds the limit of {BODY_LIMIT} bytes") from None
    except web.RequestPayloadError as exc:
        raise HttpError(400, f"malformed request body: {exc}") from None
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HttpError(400, f"malformed JSON: {exc}") from None
    except (RecursionError, ValueError) as exc:
        raise HttpError(400, f"malformed JSON: {type(exc).__name__}") from None
    if not isinstance(body, dict):
        raise HttpError(422, f"body: expected a JSON object, got {type(body).__name__}",
                        [{"field": "body", "message": "expected a JSON object"}])
    extra = sorted(set(body) - set(FIELDS))
    if extra:
        raise field_error(str(extra[0])[:80], f"unknown field (expected {', '.join(FIELDS)})")
    return body


async def keys_route(request: web.Request) -> web.Response:
    issuer = request.app[ISSUER]
    keys = [{"token_key_id": b64e(k.token_key_id), "public_key": b64e(k.public_der)} for k in issuer.keys.values()]
    return web.json_response({"token_type": TOKEN_TYPE, "keys": keys})


async def token_route(request: web.Request) -> web.Response:
    issuer = request.app[ISSUER]
    if issuer.limiter is not None:
        wait = issuer.limiter.take(request.remote)
        if wait > 0:
            raise HttpError(429, "too many token requests from this address; retry later",
                            headers={"Retry-After": retry_after_header(wait)})
    body = await _json_body(request)
    credential = body.get("credential")
    if credential is None:
        raise field_error("credential", "missing")
    if not isinstance(credential, str):
        raise field_error("credential", f"must be a string, got {type(credential).__name__}")
    key_id = _decode_field(body, "token_key_id", identity_token.KEY_ID_BYTES)
    blinded_msg = _decode_field(body, "blinded_msg", BLINDED_MSG_BYTES)
    key = issuer.keys.get(key_id)
    if key is None:
        raise HttpError(404, "token_key_id: not a key this issuer signs with (GET /v1/issuer/keys lists them)")
    if int.from_bytes(blinded_msg, "big") >= key.public.public_numbers().n:
        raise field_error("blinded_msg", "not below the issuer key's modulus")
    now = issuer.clock.time()
    try:
        admission = issuer.attester.admit(credential, now)
    except CredentialRefused as exc:
        raise HttpError(403, f"credential refused: {exc.reason}") from None
    charge = await asyncio.to_thread(issuer.quota.charge, admission.app, admission.install, now)
    if not charge.granted:
        raise HttpError(
            429,
            f"quota spent: install {admission.install!r} of app {admission.app!r} has had {charge.used} of its "
            f"{charge.limit} token(s) per {issuer.quota.window_s / 3600:g} hours; the next one in {charge.retry_after_header()} s",
            headers={"Retry-After": charge.retry_after_header()},
        )
    try:
        blind_sig = await asyncio.to_thread(blind_rsa.blind_sign, key.private, blinded_msg)
    except BaseException:
        await asyncio.to_thread(issuer.quota.refund, charge)
        raise
    return web.json_response({"blind_sig": b64e(blind_sig), "remaining": charge.remaining})


async def healthz(request: web.Request) -> web.Response:
    issuer = request.app[ISSUER]
    return web.json_response({"status": "ok", "keys": len(issuer.keys)})


def _error_json(status: int, message: str, detail: Any = None, headers: dict[str, str] | None = None) -> web.Response:
    body: dict[str, Any] = {"error": message}
    if detail is not None:
        body["detail"] = detail
    return web.json_response(body, status=status, headers=headers)


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """HttpError and aiohttp's HTTP exceptions as JSON; anything else is a bug: logged, 500. One line per refusal."""
    try:
        return await handler(request)
    except HttpError as exc:
        status, message, detail, headers = exc.status, exc.message, exc.detail, exc.headers
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        status, detail = exc.status, None
        message = {404: f"no route {request.method} {request.path[:200]}",
                   405: f"method {request.method} not allowed on {request.path[:200]}",
                   413: f"request body exceeds the limit of {BODY_LIMIT} bytes"}.get(exc.status, exc.reason)
        allow = exc.headers.get("Allow")
        headers = {"Allow": allow} if allow is not None else {}
    except ConnectionResetError:  # the client went away while its answer was written: nothing to refuse
        return _error_json(400, "client disconnected")
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path[:200])
        return _error_json(500, "internal error")
    issuer = request.app[ISSUER]
    issuer.refusals[status] = issuer.refusals.get(status, 0) + 1
    log.info("refused %s %s from %s: %d %s", request.method, request.path[:200], request.remote, status, message)
    return _error_json(status, message, detail, headers)


def create_app(issuer: Issuer) -> web.Application:
    """The service over `issuer` (whose quota store the app closes on cleanup)."""
    app = web.Application(client_max_size=BODY_LIMIT, middlewares=[errors])
    app[ISSUER] = issuer

    async def prune_forever() -> None:
        while True:
            removed = await asyncio.to_thread(issuer.quota.prune, issuer.clock.time())
            if removed:
                log.info("pruned %d issuance record(s) older than the quota window", removed)
            await asyncio.sleep(PRUNE_EVERY_S)

    async def background(app: web.Application) -> Any:
        task = asyncio.create_task(prune_forever())
        yield
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        issuer.quota.close()

    app.cleanup_ctx.append(background)
    app.router.add_get("/v1/issuer/keys", keys_route)
    app.router.add_post("/v1/issuer/token", token_route)
    app.router.add_get("/healthz", healthz)
    return app
