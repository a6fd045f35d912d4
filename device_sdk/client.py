"""`DeviceClient`: registers the device, checks in, and runs its assigned secure-aggregation cohorts.

One `run_once()` = one check-in (long-polled) and, when assigned, the whole cohort: compute the
contribution with the query kind, add the DP noise share (device_sdk.noise), mask it with
`secagg.ClientSession`, and exchange phase messages. `run_forever()` repeats, honours `retry_after`, and
backs off exponentially with full jitter on network errors.

Servers: one URL or several (a list, or one string of comma-separated URLs) of processes sharing one
database. Registration and check-ins go to the current one; when it cannot be reached or answers 502/503/504
the device moves on to the next (round robin) and stays there while it works. A cohort's phase requests go
to the process that runs it (the assignment's `server_url`, else the check-in URL); if that process cannot
be reached, or no longer knows the cohort, the device leaves the cohort (as if it aborted) and checks in
again. Every request is signed with the device's
Ed25519 key (kept in the store, so the registration survives restarts). Keys, nonces, masks and noise come
from one injected source (`device_sdk.randomness`; OS entropy by default).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlencode

import aiohttp
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from device_sdk.randomness import DeviceRandomness
from device_sdk.servers import parse_server_urls
from device_sdk.store import LocalStore
from device_sdk.validity import contribution
from queries.envelope import (
    HDR_DEVICE,
    HDR_NONCE,
    HDR_PHASE,
    HDR_PROTOCOL,
    HDR_SIGNATURE,
    HDR_TIMESTAMP,
    MAX_LONG_POLL_S,
    PROTOCOL_VERSION,
    Assignment,
    CheckinResponse,
    b64d,
    b64e,
    device_id_for,
    signing_payload,
)
from queries.registry import get_kind
from secagg import encoding
from secagg.client import ClientSession
from secagg.config import SecAggConfig
from secagg.errors import SecAggError
from secagg.phases import Phase
from secagg.plain import PlainClientSession, bench_unmasked
from secagg.randomness import RandomSource

log = logging.getLogger(__name__)
KEY_META = "device_key"
ID_META = "device_id"
REGISTERED_META = "registered_at"

FAILOVER_STATUSES = (502, 503, 504)
KEEPALIVE_S = 5.0
"""How long an idle pooled connection is reused: well below the server's idle timeout (`FA_IDLE_TIMEOUT_S`,
15 s by default). aiohttp reuses the oldest idle connection first, so with a timeout equal to the server's a
busy fleet kept sending requests on connections the server was closing ("Server disconnected"); a request
that still meets a closed connection is sent once more on a new one (`DeviceClient.request`)."""


def new_connector() -> aiohttp.TCPConnector:
    """The connection pool for device requests (no connection cap: long-polls hold their connections)."""
    return aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S)
"""Answers (from a balancer or a process shutting down) after which the device tries the next server URL."""

DropoutFn = Callable[[Assignment], int | None]
"""Simulation hook: the phase before which this device stops answering, or None."""


class ServerError(Exception):
    """An HTTP error answer from the server that the device cannot act on."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


class ProtocolVersionError(ServerError):
    """The server speaks another version of the device protocol: retrying cannot help, this SDK must be updated."""

    def __init__(self, status: int, message: str, server_version: str) -> None:
        super().__init__(status, message)
        self.server_version = server_version


@dataclass(frozen=True)
class Outcome:
    status: Literal["idle", "finished", "dropped", "aborted", "rejected"]
    retry_after: float = 0.0
    cohort_id: str | None = None
    contributed: bool | None = None
    detail: str = ""
    queries_running: int = 0


class DeviceClient:
    def __init__(
        self,
        server_url: str | Sequence[str],
        store: LocalStore,
        *,
        session: aiohttp.ClientSession | None = None,
        checkin_wait_s: float = 10.0,
        dropout: DropoutFn | None = None,
        backoff_base_s: float = 0.5,
        backoff_cap_s: float = 30.0,
        request_timeout_s: float = 120.0,
        randomness: RandomSource | None = None,
    ) -> None:
        self.servers = parse_server_urls(server_url)
        self._current = 0
        self.store = store
        self._session = session
        self._own_session = session is None
        self.checkin_wait_s = checkin_wait_s
        self.dropout = dropout
        self.backoff_base_s = backoff_base_s
        self.backoff_cap_s = backoff_cap_s
        self.timeout = aiohttp.ClientTimeout(total=request_timeout_s)
        self._abandoned: set[str] = set()
        self._jitter = random.Random()
        self.randomness = DeviceRandomness(randomness)
        raw = store.get_meta(KEY_META)
        if raw is None:
            key = Ed25519PrivateKey.from_private_bytes(self.randomness.identity_key())
            store.set_meta(KEY_META, b64e(key.private_bytes_raw()))
        else:
            key = Ed25519PrivateKey.from_private_bytes(b64d(raw, KEY_META, 32))
        self.key = key
        self.public_key = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.device_id = device_id_for(self.public_key)

    # -- transport ------------------------------------------------------------------------------

    @property
    def server(self) -> str:
        """The server URL registrations and check-ins go to now."""
        return self.servers[self._current]

    def start_at(self, index: int) -> None:
        """Begin with the `index`-th URL (mod their number): spreads a fleet over processes by hand."""
        self._current = index % len(self.servers)

    def fail_over(self) -> None:
        """Move registrations and check-ins to the next URL."""
        if len(self.servers) > 1:
            self._current = (self._current + 1) % len(self.servers)
            log.info("device %s: switching to server %s", self.device_id[:8], self.server)

    async def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=new_connector())
        return self._session

    async def close(self) -> None:
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def request(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        content_type: str | None = None,
        query: dict[str, Any] | None = None,
        register: bool = False,
        base: str | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        """Signed request to `base` (default: the current server) → (status, headers, body). Raises
        aiohttp.ClientError on network errors and ProtocolVersionError when the server refuses this SDK's
        protocol version."""
        path_qs = path + ("?" + urlencode(query) if query else "")
        http = await self._http()
        for attempt in (1, 2):
            ts, nonce = str(int(time.time())), self.randomness.nonce()
            headers = {
                HDR_PROTOCOL: str(PROTOCOL_VERSION),
                HDR_TIMESTAMP: ts,
                HDR_NONCE: nonce,
                HDR_SIGNATURE: b64e(self.key.sign(signing_payload(method, path_qs, ts, nonce, body))),
            }
            if not register:
                headers[HDR_DEVICE] = self.device_id
            if content_type:
                headers["Content-Type"] = content_type
            try:
                async with http.request(method, (base or self.server) + path_qs, data=body or None, headers=headers,
                                        timeout=self.timeout) as resp:
                    status, answer_headers, answer = resp.status, dict(resp.headers), await resp.read()
                break
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
                # typically a pooled connection the server closed as it was reused (a busy device's event loop may
                # release it long after the answer came): every device request may be sent again (phase messages
                # and registration are idempotent, a check-in is a new check-in)
                if attempt == 2:
                    raise
        server_version = answer_headers.get(HDR_PROTOCOL)
        if status == 400 and server_version is not None and server_version != str(PROTOCOL_VERSION):
            raise ProtocolVersionError(status, _error_text(answer), server_version)
        return status, answer_headers, answer

    async def _json(self, method: str, path: str, payload: dict[str, Any], register: bool = False) -> tuple[int, Any]:
        status, _, raw = await self.request(method, path, json.dumps(payload).encode(), "application/json", register=register)
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, {"error": raw[:200].decode("utf-8", "replace")}

    # -- protocol -------------------------------------------------------------------------------

    async def ensure_registered(self) -> str:
        if self.store.get_meta(REGISTERED_META + ":" + self.server) is not None:
            return self.device_id
        status, body = await self._json("POST", "/v1/device/register", {"public_key": b64e(self.public_key)}, register=True)
        if status not in (200, 201):
            raise ServerError(status, _msg(body))
        if body.get("device_id") != self.device_id:
            raise ServerError(status, f"server assigned unexpected device id {body.get('device_id')!r}")
        self.store.set_meta(ID_META, self.device_id)
        self.store.set_meta(REGISTERED_META + ":" + self.server, str(time.time()))
        return self.device_id

    async def run_once(self) -> Outcome:
        """One check-in; runs the assigned cohort to its end when there is one. A check-in server that cannot be
        reached (or answers 502/503/504) makes the device fail over to the next URL before the error is raised."""
        try:
            await self.ensure_registered()
            payload = {"wait_s": self.checkin_wait_s, "sources": self.store.collections()}
            status, body = await self._json("POST", "/v1/device/checkin", payload)
        except (aiohttp.ClientError, asyncio.TimeoutError):
            self.fail_over()
            raise
        except ServerError as exc:
            if exc.status in FAILOVER_STATUSES:
                self.fail_over()
            raise
        if status in FAILOVER_STATUSES:
            self.fail_over()
            raise ServerError(status, _msg(body))
        if status == 401 and "unknown device" in _msg(body):
            self.store.delete_meta(REGISTERED_META + ":" + self.server)  # server lost us: register again
            raise ServerError(status, _msg(body))
        if status != 200:
            raise ServerError(status, _msg(body))
        resp = CheckinResponse.model_validate(body)
        a = resp.assignment
        if a is None or a.cohort_id in self._abandoned:
            retry = resp.retry_after if resp.retry_after is not None else 1.0
            return Outcome("idle", retry_after=retry, queries_running=resp.queries_running)
        out = await self.run_assignment(a)
        return Outcome(out.status, out.retry_after, out.cohort_id, out.contributed, out.detail, resp.queries_running)

    async def run_assignment(self, a: Assignment) -> Outcome:
        try:
            return await self._run_assignment(a)
        finally:
            self._abandoned.add(a.cohort_id)
            if len(self._abandoned) > 1000:
                self._abandoned = set(list(self._abandoned)[-100:])

    async def _run_assignment(self, a: Assignment) -> Outcome:
        try:
            cfg = SecAggConfig.from_dict(a.secagg)
            kind = get_kind(a.kind)
            draws = self.randomness.for_contribution(a.cohort_id)
            # noise and validity proofs (device_sdk.validity): proving takes milliseconds to seconds, off the event loop
            vec, proof = await asyncio.to_thread(contribution, a, kind, self.store.rows(a.source), draws)
            modular = encoding.to_modular(vec, cfg.bits)
            if a.mode == "plain":
                if not bench_unmasked():
                    return Outcome("rejected", cohort_id=a.cohort_id, detail="refusing an unmasked (plain) assignment")
                client: ClientSession | PlainClientSession = PlainClientSession(cfg.bits, modular)
            else:
                peers = None
                if cfg.active:
                    if not a.peer_identity_keys:
                        return Outcome("rejected", cohort_id=a.cohort_id, detail="active model without peer identity keys")
                    peers = {int(p): b64d(k, "peer_identity_keys", 32) for p, k in a.peer_identity_keys.items()}
                client = ClientSession(
                    cfg, a.party_id, modular, self.key if cfg.active else None, peers, randomness=draws.secagg,
                    input_proof=proof,
                )
            message: bytes | None = client.start()
        except (ValueError, KeyError, RuntimeError) as exc:
            return Outcome("rejected", cohort_id=a.cohort_id, detail=f"cannot take part: {exc}")
        drop_at = self.dropout(a) if self.dropout else None
        try:
            return await self._exchange(a, client, message, drop_at)
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:  # the process running the cohort is gone
            log.info("device %s: leaving cohort %s: its server is unreachable (%s)", self.device_id[:8], a.cohort_id[:8], exc)
            return Outcome("aborted", cohort_id=a.cohort_id, detail=f"cohort server unreachable: {exc}")

    async def _exchange(
        self, a: Assignment, client: ClientSession | PlainClientSession, message: bytes | None, drop_at: int | None
    ) -> Outcome:
        phase = a.first_phase
        base = f"/v1/device/cohorts/{a.cohort_id}/phases"
        owner = (a.server_url or self.server).rstrip("/")
        wait = min(MAX_LONG_POLL_S, max(1.0, a.phase_timeout_s + 5.0))
        while True:
            if drop_at is not None and phase >= drop_at:
                return Outcome("dropped", cohort_id=a.cohort_id, detail=f"stopped before phase {phase}")
            status = 202
            if message is not None:  # the POST long-polls for the next phase's message (one round trip)
                status, headers, raw = await self.request(
                    "POST", f"{base}/{phase}", message, "application/octet-stream", query={"wait": wait}, base=owner
                )
                if status == 421 and headers.get("Location", "").rstrip("/") not in ("", owner):
                    owner = headers["Location"].rstrip("/")  # told which process runs the cohort: once
                    status, headers, raw = await self.request(
                        "POST", f"{base}/{phase}", message, "application/octet-stream", query={"wait": wait}, base=owner
                    )
                if status not in (200, 202):
                    return _ended(status, raw, a.cohort_id)
            while status == 202:
                status, headers, raw = await self.request("GET", f"{base}/{phase}/next", query={"wait": wait}, base=owner)
            if status != 200:
                return _ended(status, raw, a.cohort_id)
            if headers.get("Content-Type", "").startswith("application/json"):
                info = json.loads(raw)
                return Outcome("finished", cohort_id=a.cohort_id, contributed=bool(info.get("contributed")))
            try:
                message = client.receive(raw)
            except SecAggError as exc:
                return Outcome("rejected", cohort_id=a.cohort_id, detail=f"refused server message: {exc}")
            phase = int(headers.get(HDR_PHASE, phase + 1))
            if client.phase is Phase.DONE and message is None:
                return Outcome("finished", cohort_id=a.cohort_id, contributed=True)

    async def run_forever(self, stop: asyncio.Event | None = None, offline_after_drop_s: float = 0.0) -> None:
        """Check in until `stop` is set; raises ProtocolVersionError (retrying cannot help), backs off on the rest."""
        failures = 0
        stop = stop or asyncio.Event()
        while not stop.is_set():
            try:
                out = await self.run_once()
                failures = 0
            except ProtocolVersionError:
                raise
            except (aiohttp.ClientError, asyncio.TimeoutError, ServerError) as exc:
                failures += 1
                delay = self._jitter.uniform(0, min(self.backoff_cap_s, self.backoff_base_s * 2**failures))
                log.debug("device %s: %s; retrying in %.1fs", self.device_id[:8], exc, delay)
                await _sleep(stop, delay)
                continue
            if out.status == "idle":
                await _sleep(stop, out.retry_after)
            elif out.status == "dropped" and offline_after_drop_s:
                await _sleep(stop, offline_after_drop_s)


async def _sleep(stop: asyncio.Event, seconds: float) -> None:
    if seconds <= 0:
        await asyncio.sleep(0)
        return
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        pass


def _msg(body: Any) -> str:
    if isinstance(body, dict):
        return str(body.get("error", body))
    return str(body)


def _error_text(raw: bytes) -> str:
    """The server's message from an answer body: JSON `{"error": …}`, or the start of the text."""
    try:
        return _msg(json.loads(raw))
    except ValueError:
        return raw[:200].decode("utf-8", "replace")


def _ended(status: int, raw: bytes, cohort_id: str) -> Outcome:
    return Outcome("aborted", cohort_id=cohort_id, detail=f"HTTP {status}: {_error_text(raw)}")
