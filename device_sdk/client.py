"""`DeviceClient`: registers the device, checks in, and runs its assigned secure-aggregation cohorts.

One `run_once()` = one check-in (long-polled) and, when assigned, the whole cohort: parse the assignment once
(device_sdk/admission.py) and check it against the device's own policy and ledger before reading anything (device_sdk/policy.py; a refusal is
reported to the server), compute the contribution with the query kind, add the DP noise share
(device_sdk.noise), mask it in the session its hooks' factory builds (`device_sdk.sessions`: `secagg.ClientSession`,
holding the cohort to the device's survivor floor),
exchange phase messages, and settle the ledger and transparency log (device_sdk/contribution.py).
`run_forever()` repeats, honours `retry_after`, backs off exponentially with full jitter on errors, and stops
at once when its event is set. `start()`/`stop()` run it in a background thread (device_sdk/runner.py);
`run_once_sync()` is one step for plain code. Not checking in: while `eligible()` says no, after an opt-out,
or once a daily limit is reached. See docs/device_sdk.md.

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
import contextlib
import json
import logging
import random
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlencode

import aiohttp
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from pydantic import ValidationError

from device_sdk.admission import ParsedAssignment, parse_assignment
from device_sdk.contribution import LOGGED_REFUSALS, Contribution
from device_sdk.identity import TOKEN_META, Enrolment, EnrolmentError, issuer_key, obtain_token
from device_sdk.ledger import DAY_S, ContributionLedger, ContributionRecord
from device_sdk.must_await import must_await
from device_sdk.options import ClientOptions
from device_sdk.policy import Decision, Refusal, checkin_pause, decide, refuse, screen
from device_sdk.randomness import DeviceRandomness
from device_sdk.servers import parse_server_urls
from device_sdk.sessions import DeviceSession, SessionInputs
from device_sdk.store import LocalStore
from device_sdk.validity import masked_content
from fa_common.b64 import b64d, b64e
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
    PhaseMessage,
    RefusalReport,
    device_id_for,
    signing_payload,
)
from translog.check import LogCheckError
from translog.wire import LogKeyResponse, TaskProof
from device_sdk.transparency import LogFollower
from secagg import encoding, identity_token
from secagg.client import KeyPairs
from secagg.crypto import keys_payload
from secagg.errors import (
    CohortUnverifiedError,
    InconsistentSurvivorsError,
    SecAggError,
    TaskMismatchError,
    TooFewSurvivorsError,
)
from secagg.floor import UnsafeParametersError
from secagg.phases import Phase

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


def new_connector(keepalive_s: float = KEEPALIVE_S) -> aiohttp.TCPConnector:
    """The connection pool for device requests (no connection cap: long-polls hold their connections)."""
    return aiohttp.TCPConnector(limit=0, keepalive_timeout=keepalive_s)
"""Answers (from a balancer or a process shutting down) after which the device tries the next server URL."""

"""Simulation hook: the phase before which this device stops answering, or None."""


class ServerError(Exception):
    """An HTTP error answer from the server that the device cannot act on (`retry_after`: the server's
    `Retry-After`, honoured by `run_forever` as the least wait before the next try)."""

    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.retry_after = retry_after


class ProtocolVersionError(ServerError):
    """The server speaks another version of the device protocol: retrying cannot help, this SDK must be updated."""

    def __init__(self, status: int, message: str, server_version: str) -> None:
        super().__init__(status, message)
        self.server_version = server_version


@dataclass(frozen=True)
class Ahead:
    """The check-in carried the device's advertise keys and the server took them: the session must use these
    keys, the device sends nothing for the first phase, and `next` is the server's following message when the
    check-in's answer already carried it."""

    keys: KeyPairs
    next: PhaseMessage | None


@dataclass(frozen=True)
class Outcome:
    """What one `run_once` did. `status`: idle (no assignment), paused (did not check in: not eligible, a daily
    limit reached, opted out; `retry_after` says when to try again), refused (the device's policy said no;
    `reason`), finished, dropped (simulated), aborted (the cohort ended without this device), rejected (a
    protocol violation or a task the device cannot run)."""

    status: Literal["idle", "paused", "refused", "finished", "dropped", "aborted", "rejected"]
    retry_after: float = 0.0
    cohort_id: str | None = None
    contributed: bool | None = None
    detail: str = ""
    queries_running: int = 0
    reason: str | None = None
    """The refusal reason (`queries.envelope.REFUSAL_REASONS`) when status is refused."""


RUN_FOREVER_HINT = ("From plain code use client.start() / client.stop() (a background thread) or client.run_once_sync(); "
                    "from async code `await client.run_forever(stop_event)` (or asyncio.run(client.run_forever())).")
RUN_ONCE_HINT = "From plain code use client.run_once_sync(); from async code `await client.run_once()`."
RETENTION_EVERY_S = 60.0


class DeviceClient:
    def __init__(self, server_url: str | Sequence[str], store: LocalStore, options: ClientOptions | None = None) -> None:
        """`server_url`: one URL or several (module docstring); `store`: the app's `LocalStore`; `options`: a
        `ClientOptions` (`device_sdk.options`; docs/device_sdk.md, "`ClientOptions`") — the device's policy, its
        eligibility callback, network settings, callbacks, enrolment and the hooks a simulator or benchmark injects;
        None: an app's defaults."""
        if options is None:
            options = ClientOptions()
        if not isinstance(options, ClientOptions):
            raise TypeError(f"options: must be a device_sdk.ClientOptions, got {type(options).__name__} (the "
                            "keyword arguments of earlier versions are grouped in it: docs/device_sdk.md)")
        if not isinstance(store, LocalStore):
            raise TypeError(f"store: must be a LocalStore, got {type(store).__name__}")
        self.options = options
        self.policy = options.policy
        self.eligible = options.eligible
        self.on_assignment = options.callbacks.on_assignment
        self.on_contribution = options.callbacks.on_contribution
        self.on_refusal = options.callbacks.on_refusal
        self.on_error = options.callbacks.on_error
        self.ineligible_poll_s = options.ineligible_poll_s
        self.keys_with_checkin = options.keys_with_checkin
        self.enrolment = options.enrolment
        self.hooks = options.hooks
        self.ledger = ContributionLedger(store)
        self.log = LogFollower(store, self.policy)
        self._runner: Any = None
        self._retention_at = 0.0
        self._wake_loop: asyncio.AbstractEventLoop | None = None
        self._wake_event: asyncio.Event | None = None
        self.servers = parse_server_urls(server_url)
        self._current = 0
        self.store = store
        network = options.network
        self._session = network.session
        self._own_session = network.session is None
        self.checkin_wait_s = network.checkin_wait_s
        self.backoff_base_s = network.backoff_base_s
        self.backoff_cap_s = network.backoff_cap_s
        self.timeout = aiohttp.ClientTimeout(total=network.request_timeout_s)
        self._abandoned: set[str] = set()
        self._jitter = random.Random()
        self.randomness = DeviceRandomness(options.randomness)
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
            ts, nonce = str(int(self.store.clock.time())), self.randomness.nonce()
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
        return status, _json_body(raw)

    # -- protocol -------------------------------------------------------------------------------

    async def ensure_registered(self) -> str:
        if self.store.get_meta(REGISTERED_META + ":" + self.server) is not None:
            return self.device_id
        payload = {"public_key": b64e(self.public_key)}
        if self.enrolment is not None:
            payload["identity_token"] = b64e(await self.identity_token())
        status, body = await self._json("POST", "/v1/device/register", payload, register=True)
        if status == 403 and self.enrolment is None and "identity_token" in _msg(body):
            raise ServerError(status, _msg(body) + " — this device has no enrolment: pass DeviceClient(..., "
                              "ClientOptions(enrolment=Enrolment(issuer_url, credential)))")
        if status not in (200, 201):
            raise ServerError(status, _msg(body))
        if body.get("device_id") != self.device_id:
            raise ServerError(status, f"server assigned unexpected device id {body.get('device_id')!r}")
        self.store.set_meta(ID_META, self.device_id)
        self.store.set_meta(REGISTERED_META + ":" + self.server, str(self.store.clock.time()))
        return self.device_id

    async def identity_token(self) -> bytes:
        """This identity's token from the issuer (`enrolment`), obtained once and kept in the store. Raises
        EnrolmentError when the issuer refuses (a spent quota carries its Retry-After)."""
        kept = self.store.get_meta(TOKEN_META)
        if kept is not None:
            return b64d(kept, TOKEN_META, identity_token.TOKEN_BYTES)
        assert self.enrolment is not None
        http = await self._http()
        pinned = list(self.policy.trusted_issuers.values())
        key = pinned[0] if pinned else await issuer_key(http, self.enrolment, self.timeout)
        token = await obtain_token(http, self.enrolment, key, self.public_key, self.randomness.enrolment(),
                                   self.timeout)
        self.store.set_meta(TOKEN_META, b64e(token))
        return token

    # -- the device's own limits ---------------------------------------------------------------

    def _emit(self, name: str, value: Any) -> None:
        callback = getattr(self, name)
        if callback is None:
            return
        try:
            callback(value)
        except Exception:
            log.exception("device %s: the %s callback raised", self.device_id[:8], name)

    def _is_eligible(self) -> bool:
        if self.eligible is None:
            return True
        try:
            return bool(self.eligible())
        except Exception:
            log.exception("device %s: the eligibility callback raised; treating the device as not eligible", self.device_id[:8])
            return False

    def _pause(self) -> Outcome | None:
        """Why the device must not check in now (and for how long), or None."""
        if self.store.is_opted_out():
            return Outcome("paused", retry_after=self.ineligible_poll_s, detail="opted out")
        if not self._is_eligible():
            return Outcome("paused", retry_after=self.ineligible_poll_s, detail="not eligible")
        now = self.store.clock.time()
        if now - self._retention_at >= RETENTION_EVERY_S:
            self._retention_at = now
            self.store.apply_retention(now)
            self.ledger.prune(now)
        p = self.policy
        if p.max_contributions_per_day is None and p.max_epsilon_per_day is None:
            return None
        since = now - DAY_S
        spent, _, count = self.ledger.spent_since(since)
        wait = checkin_pause(p, spent, count, self.ledger.oldest_since(since), self.ledger.oldest_since(since, True), now)
        if wait is None:
            return None
        return Outcome("paused", retry_after=min(wait, DAY_S), detail="daily limit reached")

    def _admit(self, a: Assignment) -> Contribution | Refusal:
        """Parse the assignment (once: `device_sdk.admission`), check it against the policy and the ledger and reserve
        its charge — one store transaction, before any local data is read."""
        if not self._is_eligible():
            return refuse(a, "not_eligible", "the device stopped being eligible while it waited for the cohort")
        now = self.store.clock.time()
        with self.store.transaction():
            opted_out = self.store.is_opted_out(a.source)
            early = screen(self.policy, a, opted_out)
            if early is not None:
                return early
            parsed = parse_assignment(a)
            if isinstance(parsed, Refusal):
                return parsed
            spent, _, count = self.ledger.spent_since(now - DAY_S)
            verdict = decide(self.policy, parsed, self.ledger.history(a.query_id), spent, count, opted_out)
            if isinstance(verdict, Refusal):
                if verdict.reason in LOGGED_REFUSALS:  # evidence of a server below this device's floor: kept
                    row = self.ledger.reserve(**_ledger_fields(parsed, Decision(None, None, None, None, None, False), now))
                    self.ledger.refused(row, verdict.reason, verdict.detail)
                return verdict
            row = self.ledger.reserve(**_ledger_fields(parsed, verdict, now))
        return Contribution(parsed, verdict, self.ledger, row)

    async def _report_refusal(self, a: Assignment, refusal: Refusal) -> None:
        """Tell the server (best effort: it then stops waiting for this device), log it, call on_refusal."""
        log.warning("device %s: refused query %s round %d (%s): %s", self.device_id[:8], a.query_id[:8], a.round,
                    refusal.reason, refusal.detail)
        self._emit("on_refusal", refusal)
        body = RefusalReport(reason=refusal.reason, detail=refusal.detail[:500]).model_dump_json().encode()
        owner = (a.server_url or self.server).rstrip("/")
        try:
            status, headers, raw = await self.request(
                "POST", f"/v1/device/cohorts/{a.cohort_id}/refusal", body, "application/json", base=owner
            )
            if status == 421 and headers.get("Location", "").rstrip("/") not in ("", owner):
                status, _, raw = await self.request("POST", f"/v1/device/cohorts/{a.cohort_id}/refusal", body,
                                                    "application/json", base=headers["Location"].rstrip("/"))
            if status != 200:
                log.info("device %s: the server did not record the refusal: HTTP %d %s", self.device_id[:8], status,
                         _error_text(raw))
        except (aiohttp.ClientError, asyncio.TimeoutError, ServerError) as exc:
            log.info("device %s: could not report the refusal: %s", self.device_id[:8], exc)

    def transparency_log(self, since: float | None = None, limit: int = 1000) -> list[ContributionRecord]:
        """Every contribution this device accepted, newest first: what it sent, when, with which noise and ε."""
        return self.ledger.records(since, limit)

    def opt_out(self, collection: str | None = None, delete_history: bool = False) -> int:
        """Delete a collection (or, with None, every collection) and never contribute from it again; a full
        opt-out also stops the background thread and further check-ins. Returns the rows deleted."""
        if collection is not None:
            return self.store.opt_out(collection)
        deleted = self.store.opt_out_all(delete_history)
        if self._runner is not None:
            self._runner.request_stop()
        return deleted

    # -- one check-in ---------------------------------------------------------------------------

    @must_await(RUN_ONCE_HINT)
    async def run_once(self) -> Outcome:
        """One check-in; runs the assigned cohort to its end when there is one. Does not check in (status
        paused) while the device is not eligible, has opted out or reached a daily limit. A check-in server that
        cannot be reached (or answers 502/503/504) makes the device fail over to the next URL before the error
        is raised."""
        paused = self._pause()
        if paused is not None:
            log.debug("device %s: not checking in (%s)", self.device_id[:8], paused.detail)
            return paused
        try:
            await self.ensure_registered()
            sources = [c for c in self.store.collections() if self.policy.allows_source(c)]  # no more than it may use
            payload: dict[str, Any] = {"wait_s": self.checkin_wait_s, "sources": sources}
            log_size = self.log.last_size()
            if log_size is not None:
                payload["log_size"] = log_size
            keys = KeyPairs.draw(self.randomness.checkin_keys()) if self.keys_with_checkin else None
            if keys is not None:  # phase 0 sent ahead (docs/protocol.md, "Keys with the check-in")
                payload["secagg_keys"] = {"c_pk": b64e(keys.c_pk), "s_pk": b64e(keys.s_pk),
                                          "signature": b64e(self.key.sign(keys_payload(keys.c_pk, keys.s_pk)))}
            status, headers, raw = await self.request(
                "POST", "/v1/device/checkin", json.dumps(payload).encode(), "application/json"
            )
            body = _json_body(raw)
            if keys is not None and status == 422 and "secagg_keys" in _msg(body):  # a server that predates the field
                log.info("device %s: the server does not take keys with the check-in; sending them per phase",
                         self.device_id[:8])
                self.keys_with_checkin = False
                return await self.run_once()
        except (aiohttp.ClientError, asyncio.TimeoutError):
            self.fail_over()
            raise
        except ServerError as exc:
            if exc.status in FAILOVER_STATUSES:
                self.fail_over()
            raise
        if status in FAILOVER_STATUSES:
            self.fail_over()
            raise ServerError(status, _msg(body), _retry_after(headers))
        if status == 401 and "unknown device" in _msg(body):
            self.store.delete_meta(REGISTERED_META + ":" + self.server)  # server lost us: register again
            raise ServerError(status, _msg(body))
        if status != 200:
            raise ServerError(status, _msg(body), _retry_after(headers))
        try:
            resp = CheckinResponse.model_validate(body)
        except ValidationError as exc:  # a server (or proxy) answering something else: back off, do not crash
            raise ServerError(status, f"malformed check-in answer ({exc.error_count()} errors): {str(exc)[:300]}") from None
        a = resp.assignment
        if a is None or a.cohort_id in self._abandoned:
            retry = resp.retry_after if resp.retry_after is not None else 1.0
            return Outcome("idle", retry_after=retry, queries_running=resp.queries_running)
        ahead = Ahead(keys, resp.next) if resp.advertised and keys is not None else None
        out = await self.run_assignment(a, ahead, resp.log)
        return Outcome(out.status, out.retry_after, out.cohort_id, out.contributed, out.detail, resp.queries_running,
                       out.reason)

    async def run_assignment(self, a: Assignment, ahead: Ahead | None = None, log_proof: TaskProof | None = None) -> Outcome:
        """Admit the assignment under the device's policy (refusing it, with a report to the server, before any
        data is read), run it, and settle the ledger and the transparency log. `ahead`: the check-in already
        answered the first phase with these keys; `log_proof`: the check-in's proof that the task is in the
        server's transparency log (docs/transparency.md)."""
        try:
            log.info("device %s: assigned query %s round %d (%s on %r), cohort %s", self.device_id[:8], a.query_id[:8],
                     a.round, a.kind, a.source, a.cohort_id[:8])
            self._emit("on_assignment", a)
            admitted = self._admit(a)
            if isinstance(admitted, Refusal):
                await self._report_refusal(a, admitted)
                return Outcome("refused", cohort_id=a.cohort_id, detail=admitted.detail, reason=admitted.reason)
            out: Outcome | None = None
            try:
                out = await self._run_assignment(a, admitted, ahead, log_proof)
            finally:
                finished = out is not None and out.status == "finished"
                record = admitted.end(finished, out.contributed if out is not None else None,
                                      out.detail if out is not None else "interrupted",
                                      refused=out.reason if out is not None and out.status == "refused" else None)
                if record is not None and record.status != "refused":
                    log.info("device %s: contributed to query %s round %d (%s; ε charged %s)", self.device_id[:8],
                             a.query_id[:8], a.round, record.status, record.epsilon)
                    self._emit("on_contribution", record)
            if out.status == "refused" and out.reason is not None:
                await self._report_refusal(a, refuse(a, out.reason, out.detail))  # type: ignore[arg-type]
            return out
        finally:
            self._abandoned.add(a.cohort_id)
            if len(self._abandoned) > 1000:
                self._abandoned = set(list(self._abandoned)[-100:])

    async def _run_assignment(self, a: Assignment, contribution: Contribution, ahead: Ahead | None = None,
                              log_proof: TaskProof | None = None) -> Outcome:
        if self.policy.require_log or log_proof is not None:
            refused = await self._check_log(a, contribution, log_proof)
            if refused is not None:
                return refused
        if not self.hooks.session_factory.takes_checkin_keys:
            ahead = None  # the session's first phase is not the keys the check-in carried: the device sends it itself
        async with self._turn():
            prepared = await self._prepare(a, contribution, ahead)
        if isinstance(prepared, Outcome):
            return prepared
        client, message = prepared
        drop_at = self.hooks.dropout(a) if self.hooks.dropout else None
        try:
            return await self._exchange(a, client, message, drop_at, contribution.before_send, ahead)
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:  # the process running the cohort is gone
            log.info("device %s: leaving cohort %s: its server is unreachable (%s)", self.device_id[:8], a.cohort_id[:8], exc)
            return Outcome("aborted", cohort_id=a.cohort_id, detail=f"cohort server unreachable: {exc}")

    async def _check_log(self, a: Assignment, contribution: Contribution, proof: TaskProof | None) -> Outcome | None:
        """Refuse (`not_logged`) unless the task is in the server's transparency log under a head that extends the
        last one this device saw; else record the entry and head with the contribution. Runs before any data is
        read."""
        try:
            if proof is not None and self.log.keys() is None:  # trust on first use (policy.log_keys unset)
                status, _, raw = await self.request("GET", "/v1/log/key")
                if status != 200:
                    raise LogCheckError(f"the server's log key is not available (HTTP {status})")
                self.log.pin(LogKeyResponse.model_validate(_json_body(raw)))
            signed = self.log.check(proof, contribution.parsed, self.store.clock.time())
        except (LogCheckError, ValidationError, ValueError) as exc:
            return Outcome("refused", cohort_id=a.cohort_id, reason="not_logged", detail=f"transparency log: {exc}")
        self.log.accept(signed)
        assert proof is not None
        contribution.ledger.set_log(contribution.row_id, proof.index, signed.head.size, b64e(signed.head.root))
        return None

    @contextlib.asynccontextmanager
    async def _turn(self) -> AsyncIterator[None]:
        """This device's turn on the CPU it shares with the others holding the hooks' `compute_gate` (none without one)."""
        if self.hooks.compute_gate is None:
            yield
            return
        async with self.hooks.compute_gate:
            await asyncio.sleep(0)  # a turn of the loop first: the previous device's request is written before this computes
            yield

    async def _prepare(
        self, a: Assignment, contribution: Contribution, ahead: Ahead | None
    ) -> Outcome | tuple[DeviceSession, bytes | None]:
        """The contribution (checked against the device's own bounds), its noise and proof, and the protocol session
        (`hooks.session_factory`, secure aggregation unless a benchmark injected another) with its first message; or
        the outcome that ends the assignment here."""
        parsed = contribution.parsed
        factory = self.hooks.session_factory
        try:
            draws = self.randomness.for_contribution(a.cohort_id)
            raw = parsed.kind.contribute(parsed.task, self.store.rows(a.source), draws.kind)
            over = contribution.check_vector(raw)
            if over is not None:
                return Outcome("refused", cohort_id=a.cohort_id, detail=over.detail, reason=over.reason)
            # noise, blinding limbs and validity proof (device_sdk.validity): proving takes milliseconds to seconds,
            # off the event loop
            vec, proof = await asyncio.to_thread(masked_content, parsed, raw, draws)
            client = factory.build(SessionInputs(
                parsed, encoding.to_modular(vec, parsed.secagg.bits), self.key, draws.secagg, proof,
                contribution.min_survivors, ahead.keys if ahead is not None else None,
                self.policy))
            message: bytes | None = client.start()  # with `ahead`, the bytes the server built from the check-in
        except UnsafeParametersError as exc:  # below this device's own safety floor: nothing computed, nothing sent
            return Outcome("refused", cohort_id=a.cohort_id, detail=str(exc), reason="unsafe_parameters")
        except (ValueError, KeyError, RuntimeError) as exc:
            return Outcome("rejected", cohort_id=a.cohort_id, detail=f"cannot take part: {exc}")
        return client, message

    async def _exchange(
        self, a: Assignment, client: DeviceSession, message: bytes | None, drop_at: int | None,
        before_send: Callable[[int], None] = lambda phase: None, ahead: Ahead | None = None,
    ) -> Outcome:
        phase = a.first_phase
        base = f"/v1/device/cohorts/{a.cohort_id}/phases"
        owner = (a.server_url or self.server).rstrip("/")
        wait = min(MAX_LONG_POLL_S, max(1.0, a.phase_timeout_s + 5.0))
        while True:
            if drop_at is not None and phase >= drop_at:
                return Outcome("dropped", cohort_id=a.cohort_id, detail=f"stopped before phase {phase}")
            status = 202
            if ahead is not None:  # the check-in answered the first phase, and carried the next message if ready
                if ahead.next is not None:
                    status, raw = 200, b64d(ahead.next.body, "next.body")
                    headers = {"Content-Type": "application/octet-stream", HDR_PHASE: str(ahead.next.phase)}
                ahead = None
            elif message is not None:  # the POST long-polls for the next phase's message (one round trip)
                before_send(phase)
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
                async with self._turn():
                    message = client.receive(raw)
            except TooFewSurvivorsError as exc:  # the device's own floor (policy, t_min): refused before unmasking
                return Outcome("refused", cohort_id=a.cohort_id, detail=str(exc), reason="survivors_below_minimum")
            except TaskMismatchError as exc:  # a peer signed another task (or its keys were swapped): nothing sent
                return Outcome("refused", cohort_id=a.cohort_id, detail=str(exc), reason="task_mismatch")
            except CohortUnverifiedError as exc:  # fewer verified members than the policy's min_cohort: nothing revealed
                return Outcome("refused", cohort_id=a.cohort_id, detail=str(exc), reason="cohort_unverified")
            except UnsafeParametersError as exc:  # neighbours short of the floor (invented identities): nothing sent
                return Outcome("refused", cohort_id=a.cohort_id, detail=str(exc), reason="unsafe_parameters")
            except InconsistentSurvivorsError as exc:  # two survivor sets: nothing revealed
                return Outcome("refused", cohort_id=a.cohort_id, detail=str(exc), reason="inconsistent_survivors")
            except SecAggError as exc:
                return Outcome("rejected", cohort_id=a.cohort_id, detail=f"refused server message: {exc}")
            phase = int(headers.get(HDR_PHASE, phase + 1))
            if client.phase is Phase.DONE and message is None:
                return Outcome("finished", cohort_id=a.cohort_id, contributed=True)

    # -- loops and threads ----------------------------------------------------------------------

    @must_await(RUN_FOREVER_HINT)
    async def run_forever(self, stop: asyncio.Event | None = None, offline_after_drop_s: float = 0.0) -> None:
        """Check in until `stop` is set (it takes effect at once, even during a long-poll or a cohort, which the
        device then leaves); raises ProtocolVersionError (retrying cannot help), backs off with full jitter on
        the rest, honouring the server's `retry_after`. A coroutine: `await` it, or use `start()`."""
        failures = 0
        stop = stop or asyncio.Event()
        while not stop.is_set():
            try:
                out = await _unless_stopped(stop, self.run_once())
                failures = 0
            except ProtocolVersionError as exc:
                self._emit("on_error", exc)
                raise
            except Exception as exc:  # network, server answers, and anything a bad answer breaks: back off
                failures += 1
                delay = self._jitter.uniform(0, min(self.backoff_cap_s, self.backoff_base_s * 2**failures))
                if isinstance(exc, (ServerError, EnrolmentError)) and exc.retry_after:
                    delay = max(delay, exc.retry_after)
                if isinstance(exc, (aiohttp.ClientError, asyncio.TimeoutError, ServerError, EnrolmentError)):
                    log.warning("device %s: %s; retrying in %.1fs", self.device_id[:8], exc, delay)
                else:
                    log.exception("device %s: unexpected error; retrying in %.1fs", self.device_id[:8], delay)
                self._emit("on_error", exc)
                await _sleep(stop, delay)
                continue
            if out is None:  # stopped
                return
            if out.status in ("idle", "paused"):
                await self._rest(stop, _jittered(out.retry_after, self._jitter) if out.status == "idle" else out.retry_after)
            elif out.status == "dropped" and offline_after_drop_s:
                await _sleep(stop, offline_after_drop_s)

    async def _rest(self, stop: asyncio.Event, seconds: float) -> None:
        """Wait `seconds` between check-ins, or less if `stop` is set or `wake()` is called."""
        self._wake_loop, self._wake_event = asyncio.get_running_loop(), asyncio.Event()
        waiter = asyncio.ensure_future(self._wake_event.wait())
        sleeper = asyncio.ensure_future(_sleep(stop, seconds))
        try:
            await asyncio.wait({waiter, sleeper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            sleeper.cancel()
            self._wake_loop = self._wake_event = None

    def wake(self) -> None:
        """Cut the current pause short, from any thread: call it when the app's eligibility facts change (the
        charger was plugged in) so the device checks again now instead of after `ineligible_poll_s`."""
        loop, event = self._wake_loop, self._wake_event
        if loop is not None and event is not None and not loop.is_closed():
            loop.call_soon_threadsafe(event.set)

    def start(self) -> None:
        """Run `run_forever` in a background thread (its own event loop) until `stop()`. Not with a `session=`
        of another event loop."""
        from device_sdk.runner import BackgroundRunner

        if self._runner is not None and self._runner.alive:
            raise RuntimeError("the device is already running in its background thread")
        if not self._own_session:
            raise RuntimeError("start() runs its own event loop: create the DeviceClient without session=")
        self._runner = BackgroundRunner(self)
        self._runner.start()

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop the background thread: it leaves any long-poll or cohort at once. True once it has ended."""
        if self._runner is None:
            return True
        ended = bool(self._runner.stop(timeout))
        if ended:
            self._runner = None
        return ended

    @property
    def running(self) -> bool:
        """Whether the background thread runs."""
        return self._runner is not None and self._runner.alive

    def run_once_sync(self) -> Outcome:
        """`run_once` for plain (non-async) code: one check-in and its cohort, on a private event loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError("run_once_sync() was called inside a running event loop; use `await client.run_once()`")
        if self.running:
            raise RuntimeError("the device runs in its background thread; stop() it before calling run_once_sync()")
        if not self._own_session:
            raise RuntimeError("run_once_sync() runs its own event loop: create the DeviceClient without session=")
        return asyncio.run(self._once_then_close())

    async def _once_then_close(self) -> Outcome:
        try:
            return await self.run_once()
        finally:
            await self.close()


def _ledger_fields(parsed: ParsedAssignment, d: Decision, now: float) -> dict[str, Any]:
    a = parsed.assignment
    p = a.privacy
    public = p.model_dump(exclude={"l1_sensitivity", "l2_sensitivity"}) if p is not None else {}
    return {
        "query_id": a.query_id, "round": a.round, "cohort_id": a.cohort_id, "kind": a.kind, "source": a.source,
        "accepted_at": now, "mechanism": a.noise.mechanism if a.noise is not None else "none",
        "epsilon": d.epsilon_charge, "delta": d.delta_charge,
        "query_epsilon": p.epsilon if p is not None else None, "query_delta": p.delta if p is not None else None,
        "query_privacy": public, "noise_scale": a.noise.scale if a.noise is not None else None,
        "noise_std": a.noise.std if a.noise is not None else None,
        "encoding_scale": a.noise.encoding_scale if a.noise is not None else 1, "proofs": d.proofs,
        "cohort_size": parsed.secagg.n, "min_survivors": d.min_survivors,
    }


async def _unless_stopped(stop: asyncio.Event, work: Coroutine[Any, Any, Outcome]) -> Outcome | None:
    """Run `work` until it ends or `stop` is set; then cancel it (leaving any long-poll or cohort) and return
    None. An outcome that is already there wins over the stop."""
    task = asyncio.ensure_future(work)
    waiter = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    finally:
        waiter.cancel()
    if task.done():
        return task.result()
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, Exception):
        pass
    return None


def _jittered(seconds: float, rng: random.Random) -> float:
    """Pace steering: at least what the server asked, up to 10 % more so a fleet does not come back at once."""
    return seconds * (1.0 + 0.1 * rng.random()) if seconds > 0 else seconds


def _retry_after(headers: dict[str, str]) -> float | None:
    try:
        value = float(headers.get("Retry-After", ""))
    except ValueError:
        return None
    return value if 0 <= value <= 3600 else None


def _json_body(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return {"error": raw[:200].decode("utf-8", "replace")}


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
