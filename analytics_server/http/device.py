"""Device API (docs/protocol.md): registration, check-in, and the secure-aggregation phase messages.

Every request names the protocol version it speaks (`X-FA-Protocol`; any other than
`queries.envelope.PROTOCOL_VERSION` gets 400 naming the supported one). Every request but registration is
signed by the device key (analytics_server.auth.DeviceAuth); registration is signed by the key being
registered (proof of possession). Phase messages are binary
(`application/octet-stream`): the device POSTs its secagg bytes for the phase and long-polls
`…/next` for the server's message of the following phase.

Order of checks: everything that needs no body (signing headers, timestamp window, device known, cohort,
membership, phase, content type, declared length) comes first; then the body is read, bounded by the
route's limit (a phase message by its cohort's largest legitimate message); then the signature; then
state-changing requests claim their nonce in the database before they act.
"""

from __future__ import annotations

import logging
import math

from aiohttp import web
from nacl.signing import VerifyKey

from analytics_server.cohort import CohortRuntime, NextMessage
from analytics_server.http.common import app_state, json_model, parse_json_body, parse_model, read_body
from analytics_server.state import AppState
from fa_common.b64 import b64d, b64e
from fa_common.errors import RequestError
from fa_common.http_errors import HttpError
from fa_common.ratelimit import retry_after_header
from queries.envelope import (
    HDR_DEVICE,
    HDR_PHASE,
    HDR_PROTOCOL,
    MAX_LONG_POLL_S,
    PROTOCOL_VERSION,
    CheckinRequest,
    CheckinResponse,
    CohortStatus,
    PhaseMessage,
    RefusalReport,
    RegisterRequest,
    RegisterResponse,
    SecAggKeys,
    device_id_for,
)
from secagg import identity_token
from secagg.phases import Phase

routes = web.RouteTableDef()
log = logging.getLogger(__name__)
PHASE0_WAIT_CAP_S = 30.0
"""Longest a check-in that carried keys waits, once seated, for phase 0 to close: with the seat's own long-poll
(≤ MAX_LONG_POLL_S) the check-in stays under the SDKs' 120 s request timeout."""


def _device_state(request: web.Request) -> AppState:
    """The process's shared objects, once the request speaks this server's protocol version."""
    header = request.headers.get(HDR_PROTOCOL, "").strip()
    if header != str(PROTOCOL_VERSION):
        got = f"got {header[:20]!r}" if header else f"the request has no {HDR_PROTOCOL} header"
        raise HttpError(
            400,
            f"{HDR_PROTOCOL}: this server speaks device protocol {PROTOCOL_VERSION}; {got}",
            headers={HDR_PROTOCOL: str(PROTOCOL_VERSION)},
        )
    return app_state(request)


@routes.post("/v1/device/register")
async def register(request: web.Request) -> web.Response:
    st = _device_state(request)
    if st.register_limiter is not None:
        wait = st.register_limiter.take(request.remote)
        if wait > 0:
            retry = retry_after_header(wait)
            raise HttpError(429, f"too many registrations from this address; retry in {retry} s",
                            headers={"Retry-After": retry})
    if request.headers.get(HDR_DEVICE):
        raise HttpError(400, f"{HDR_DEVICE} must not be sent when registering")
    hdrs = st.auth.signed_headers(request)
    body = await read_body(request, st.settings.device_json_body_limit)
    req = parse_model(RegisterRequest, parse_json_body(request, body))
    try:
        raw = b64d(req.public_key, "public_key", 32)
        key = VerifyKey(raw)
    except ValueError as exc:
        raise HttpError(422, str(exc)) from None
    st.auth.check_signature(key, request, body, hdrs)
    token = _identity_token(st, req, raw)
    device_id = device_id_for(raw)
    await st.auth.claim(device_id, hdrs)
    await st.store.devices.register(device_id, raw, token)
    return json_model(RegisterResponse(device_id=device_id), 201, exclude_none=True)


def _identity_token(st: AppState, req: RegisterRequest, identity_key: bytes) -> bytes | None:
    """The registration's identity token, checked against the issuer keys this server trusts (docs/identities.md):
    required when it trusts any, and then it must vouch for the key being registered."""
    if req.identity_token is None:
        if st.issuer_keys:
            raise HttpError(403, "identity_token: this server admits only devices an identity issuer vouched for; "
                                 "enrol with the issuer and register with its token (docs/identities.md)")
        return None
    try:
        raw = b64d(req.identity_token, "identity_token", identity_token.TOKEN_BYTES)
    except ValueError as exc:
        raise HttpError(422, str(exc)) from None
    if not st.issuer_keys:
        return None  # no issuer to check it against: nothing is stored that no one could verify
    try:
        identity_token.verify(raw, identity_key, st.issuer_keys)
    except identity_token.TokenError as exc:
        raise HttpError(403, f"identity_token: {exc}") from None
    return raw


@routes.post("/v1/device/checkin")
async def checkin(request: web.Request) -> web.Response:
    st = _device_state(request)
    arrived = st.pool.clock.monotonic()
    dev = await st.auth.identify(request)
    body = await read_body(request, st.settings.device_json_body_limit)
    st.auth.check_signature(dev.key, request, body, dev.headers)
    req = parse_model(CheckinRequest, parse_json_body(request, body))
    await st.auth.claim(dev.device_id, dev.headers)  # before the device can be seated in a cohort
    device_id = dev.device_id
    st.metrics.checkins += 1
    assignment, waited = await st.pool.checkin(device_id, min(req.wait_s, st.settings.checkin_max_wait_s), arrived,
                                               gone=lambda: _client_gone(request))
    running = st.orchestrator.running_count()
    if assignment is not None:
        proof = await st.store.log.task_proof(assignment.cohort_id, req.log_size)
        resp = CheckinResponse(assignment=assignment, log=proof, queries_running=running)
        if req.secagg_keys is not None:  # a long-poll of its own for phase 0 (docs/protocol.md)
            wait_s = min(req.wait_s, st.settings.checkin_max_wait_s, PHASE0_WAIT_CAP_S)
            await _advertise_from_checkin(st, device_id, req.secagg_keys, resp, wait_s)
            st.metrics.checkin_keys[bool(resp.advertised)] += 1
        return json_model(resp, exclude_none=True)
    # after a full long-poll the device may come straight back; otherwise it waits retry_after_s
    retry = 0.0 if waited else st.settings.retry_after_s
    return json_model(
        CheckinResponse(retry_after=retry, queries_running=running),
        headers={"Retry-After": str(math.ceil(retry))},
        exclude_none=True,
    )


def _client_gone(request: web.Request) -> bool:
    """Whether the client closed the request's connection. aiohttp does not cancel a handler whose client went
    away (handler cancellation is off), so a long-poll asks: its device is withdrawn at once (pool.py)."""
    transport = request.transport
    return transport is None or transport.is_closing()


async def _advertise_from_checkin(st: AppState, device_id: str, keys: SecAggKeys, resp: CheckinResponse,
                                  wait_s: float) -> None:
    """Record the check-in's keys as the party's advertise-keys message when this process runs its cohort, and
    answer with the next phase's message if it is ready within `wait_s` (docs/protocol.md, "Keys with the
    check-in")."""
    assert resp.assignment is not None
    cohort = st.orchestrator.cohorts.get(resp.assignment.cohort_id)
    if cohort is None or resp.assignment.first_phase != Phase.ADVERTISE_KEYS:
        resp.advertised = False
        return
    try:
        c_pk, s_pk = b64d(keys.c_pk, "secagg_keys.c_pk", 32), b64d(keys.s_pk, "secagg_keys.s_pk", 32)
        sig = b64d(keys.signature, "secagg_keys.signature", 64) if keys.signature is not None else b""
    except ValueError as exc:
        raise HttpError(422, str(exc)) from None
    resp.advertised = await cohort.advertise_from_checkin(device_id, c_pk, s_pk, sig)
    if not resp.advertised:
        return
    try:
        nxt = await cohort.next_message(device_id, Phase.ADVERTISE_KEYS, max(0.0, wait_s))
    except RequestError:  # dropped or aborted meanwhile: the device's long-poll for the message tells it why
        return
    if nxt.kind == "message":
        resp.next = PhaseMessage(phase=nxt.phase, body=b64e(nxt.body))


async def _cohort(st: AppState, cohort_id: str) -> CohortRuntime:
    """The cohort if this process runs it. A cohort another live process runs gets 421 naming that process's
    URL (the assignment's `server_url`; the device sent this request to the wrong process)."""
    cohort = st.orchestrator.cohorts.get(cohort_id)
    if cohort is not None:
        return cohort
    route = await st.store.cohorts.route(cohort_id[:64])
    if route is not None and route[0] == "running" and route[1] and route[1] != st.process.url:
        raise HttpError(421, f"cohort {cohort_id[:64]!r} is run by the server process at {route[1]}; send its requests there",
                        headers={"Location": route[1]})
    raise HttpError(404, f"unknown cohort {cohort_id[:64]!r} (it ended long ago or the server process running it stopped)")


def _phase(request: web.Request) -> int:
    text = request.match_info["phase"]
    # Phase.UNMASKING is the last phase a device sends a message in; "²".isdigit() is True but int() refuses it
    if not (text.isascii() and text.isdigit()) or int(text) > Phase.UNMASKING:
        raise HttpError(400, f"phase: must be an integer 0..{int(Phase.UNMASKING)}, got {text[:20]!r}")
    return int(text)


async def _read_only(st: AppState, request: web.Request) -> str:
    """Authenticate a read-only device request (small body, in-process replay check)."""
    dev = await st.auth.identify(request)
    body = await read_body(request, st.settings.device_json_body_limit)
    st.auth.check_signature(dev.key, request, body, dev.headers)
    st.auth.claim_read_only(dev.device_id, dev.headers)
    return dev.device_id


@routes.get("/v1/device/cohorts/{cohort_id}")
async def cohort_status(request: web.Request) -> web.Response:
    st = _device_state(request)
    device_id = await _read_only(st, request)
    cohort = await _cohort(st, request.match_info["cohort_id"])
    if device_id not in cohort.members:
        raise HttpError(403, f"device is not a member of cohort {cohort.id}")
    return json_model(
        CohortStatus(cohort_id=cohort.id, status=cohort.status, phase=cohort.phase, reason=cohort.reason), exclude_none=True
    )


@routes.post("/v1/device/cohorts/{cohort_id}/refusal")
async def refusal(request: web.Request) -> web.Response:
    """The device will not take part in this cohort under its own policy (docs/device_sdk.md): counted by
    reason in /metrics, and the cohort's phases stop waiting for it."""
    st = _device_state(request)
    dev = await st.auth.identify(request)
    cohort = await _cohort(st, request.match_info["cohort_id"])
    if dev.device_id not in cohort.members:
        raise HttpError(403, f"device is not a member of cohort {cohort.id}")
    body = await read_body(request, st.settings.device_json_body_limit)
    st.auth.check_signature(dev.key, request, body, dev.headers)
    report = parse_model(RefusalReport, parse_json_body(request, body))
    await st.auth.claim(dev.device_id, dev.headers)
    first = await cohort.withdraw(dev.device_id, report.reason)
    if first:
        st.metrics.refusals[report.reason] += 1
        log.info("cohort %s: device %s refused its assignment (%s): %s", cohort.id[:8], dev.device_id[:8],
                 report.reason, report.detail[:200])
    return web.json_response({"recorded": first, "reason": report.reason})


@routes.post("/v1/device/cohorts/{cohort_id}/phases/{phase}")
async def post_message(request: web.Request) -> web.Response:
    st = _device_state(request)
    dev = await st.auth.identify(request)
    phase = _phase(request)
    cohort = await _cohort(st, request.match_info["cohort_id"])
    if dev.device_id not in cohort.members:
        raise HttpError(403, f"device is not a member of cohort {cohort.id}")
    if request.content_type != "application/octet-stream":
        raise HttpError(415, f"Content-Type must be application/octet-stream, got {request.content_type or 'none'}")
    body = await read_body(request, min(st.settings.binary_body_limit, cohort.message_limit))
    st.auth.check_signature(dev.key, request, body, dev.headers)
    if not body:
        raise HttpError(400, "empty body: expected the secagg message bytes")
    st.auth.claim_read_only(dev.device_id, dev.headers)  # idempotent by content: no database claim (auth.py)
    await cohort.submit(dev.device_id, phase, body)
    wait_s = _wait_s(request)
    if wait_s > 0:  # one round trip: the answer to this phase's message is the next phase's message
        return _next_response(await cohort.next_message(dev.device_id, phase, wait_s), accepted=True)
    return web.json_response({"accepted": True, "phase": phase}, status=202)


def _wait_s(request: web.Request) -> float:
    try:
        wait_s = float(request.query.get("wait", "0"))
    except ValueError:
        raise HttpError(400, "wait: must be a number of seconds") from None
    if not 0 <= wait_s <= MAX_LONG_POLL_S:  # also refuses nan
        raise HttpError(400, f"wait: must be between 0 and {MAX_LONG_POLL_S:g} seconds")
    return wait_s


def _next_response(nxt: NextMessage, accepted: bool = False) -> web.Response:
    if nxt.kind == "message":
        return web.Response(body=nxt.body, content_type="application/octet-stream", headers={HDR_PHASE: str(nxt.phase)})
    if nxt.kind == "finished":
        return web.json_response({"status": "finished", "contributed": nxt.contributed})
    extra = {"accepted": True} if accepted else {}
    return web.json_response({"status": "pending", "retry_after": 0.5, **extra}, status=202)


@routes.get("/v1/device/cohorts/{cohort_id}/phases/{phase}/next")
async def next_message(request: web.Request) -> web.StreamResponse:
    st = _device_state(request)
    device_id = await _read_only(st, request)
    phase = _phase(request)
    wait_s = _wait_s(request)
    cohort = await _cohort(st, request.match_info["cohort_id"])
    return _next_response(await cohort.next_message(device_id, phase, wait_s))
