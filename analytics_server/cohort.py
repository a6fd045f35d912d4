"""One running cohort: drives its protocol's server session (`analytics_server.protocols`: SecAgg's
`secagg.ServerSession`, or the benchmark's unmasked one) through its phases over HTTP, built from the cohort's plan
(`CohortRuntime.from_plan`, `analytics_server.cohort_plan`) without branching on which protocol it runs.

Devices POST their message for the current phase (`submit`) and long-poll for the server's next message
(`next_message`). A phase closes when every expected party has answered, at its deadline
(`cohort.phase_timeout_s`), or earlier once arrivals have stalled (`stalled`: enough parties answered and
none for a grace derived from the phase's own arrival times; docs/secagg.md "Closing a phase"); `close_phase` (Shamir reconstruction, unmasking) runs in the executor. A
finished cohort's sum is stored atomically with its round (`Store.finish_cohort`); an aborted cohort is
recorded with its reason and the phase that failed, and its devices are freed. Each phase the cohort
opens is recorded on its row (and as a `cohort.phase` event) once the devices have been woken for it.
A device's message or poll that cannot be served raises a typed error of `fa_common.errors` (Conflict, Gone, Invalid,
Malformed, Forbidden); the device API answers it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from analytics_server.services import blame_service
from analytics_server.services.blame_service import FailedOpening
from analytics_server.db.store import QueryNotLive, Store
from analytics_server.logs import fields
from analytics_server.metrics import Metrics
from analytics_server.protocols import SECURE_AGGREGATION, AggregationSession, CohortProtocol, SessionInputs
from analytics_server.validation import CohortValidation
from fa_common.clock import SYSTEM_CLOCK, Clock
from fa_common.errors import Conflict, Forbidden, Gone, Invalid, Malformed, RequestError
from queries.envelope import Assignment
from secagg import encoding
from secagg.errors import AbortError, ConflictError, InvalidInputError, SecAggError
from secagg.config import SecAggConfig
from secagg.messages import AdvertiseKeys
from secagg.phases import Phase

if TYPE_CHECKING:
    from analytics_server.cohort_plan import CohortPlan

log = logging.getLogger(__name__)
OFFLOAD_BYTES = 256 * 1024
"""Messages larger than this are decoded and accumulated in the executor."""
GRACE_MIN_S = 0.5
GRACE_FACTOR = 0.5
GRACE_GAPS = 20
GAP_MARGIN = 1.5
"""A phase closes early once no answer arrived for `grace`: the longer of GRACE_GAPS mean gaps between the phase's
arrivals so far and GAP_MARGIN × the longest pause it already recovered from, at most GRACE_FACTOR × (last arrival
− phase open), never less than GRACE_MIN_S."""


@dataclass
class Arrivals:
    """When the open phase's answers arrived (event-loop clock)."""

    first: float | None = None
    last: float | None = None
    longest_gap: float = 0.0
    """The longest pause between two answers so far: arrivals that resumed after it were not a stall."""

    def add(self, when: float) -> None:
        if self.last is None:
            self.first = when
        else:
            self.longest_gap = max(self.longest_gap, when - self.last)
        self.last = when


def grace(opened: float, arrivals: Arrivals, received: int) -> float:
    """Seconds without an answer after which a phase's arrivals count as stalled. A steady burst of answers a few
    milliseconds apart stalls after GRACE_MIN_S; answers that trickle in seconds apart, or in bursts with pauses
    between them, get a proportionally longer grace, up to GRACE_FACTOR of the time the phase has taken."""
    first, last = arrivals.first, arrivals.last
    assert first is not None and last is not None
    spread = GRACE_FACTOR * (last - opened)
    if received >= 2 and last > first:
        spread = min(spread, max(GRACE_GAPS * (last - first) / (received - 1), GAP_MARGIN * arrivals.longest_gap))
    return max(GRACE_MIN_S, spread)


def stalled(now: float, opened: float, arrivals: Arrivals, received: int, quorum: int) -> bool:
    """Whether a phase may close before its deadline: at least `quorum` parties answered (never fewer than the
    protocol and t_min need) and no answer arrived for the `grace` derived from the phase's arrival times."""
    if received < quorum or arrivals.last is None:
        return False
    return now - arrivals.last >= grace(opened, arrivals, received)


@dataclass(frozen=True)
class NextMessage:
    kind: Literal["message", "finished", "pending"]
    body: bytes = b""
    phase: int = 0
    contributed: bool = False


@dataclass(frozen=True)
class CohortSpec:
    """What the runtime reads of a cohort, fixed before it starts (`CohortRuntime.from_plan` fills it from the
    cohort's plan; tests may give only what they exercise)."""

    protocol: CohortProtocol = SECURE_AGGREGATION
    config: SecAggConfig | None = None
    """The session's parameters as the assignments carry them and the cohort row stores them."""
    task_digest: bytes = bytes(32)
    """The cohort's task digest (queries/task_digest.py), as every honest member computes it."""
    validation: CohortValidation | None = None
    """Validity proofs of this cohort (analytics_server.validation), when the round proves contributions."""
    sum_check: Callable[[np.ndarray, int], str | None] | None = None
    """Why the unmasked sum (the kind's entries, signed) is implausible, or None (every round)."""
    kind_dim: int | None = None
    """Entries of the kind's vector; the masked vector may carry blinding limbs after them."""
    assignments: Mapping[str, Assignment] = field(default_factory=dict)
    """Each member's assignment envelope (the runtime keeps its own copy of the mapping)."""
    shortfall_note: str = ""
    """Appended to an abort for too few survivors: why the cohort needs that many (its noise shares' size)."""
    failed_opening: FailedOpening | None = None
    """What a refused sum does to the members (contributors filled in then); None: they keep their seats."""


class CohortRuntime:
    def __init__(
        self,
        cohort_id: str,
        query_id: str,
        round_id: int,
        session: AggregationSession,
        bits: int,
        members: dict[str, int],
        phase_timeout_s: float,
        store: Store,
        metrics: Metrics,
        executor: Executor,
        on_end: Callable[[CohortRuntime], None],
        owner: str | None = None,
        clock: Clock | None = None,
        spec: CohortSpec | None = None,
    ) -> None:
        self.id = cohort_id
        self.spec = spec = spec or CohortSpec()
        self.clock: Clock = clock or SYSTEM_CLOCK
        """Wall-clock stamps and the long-poll deadline of `next_message` (phase timers run on the loop's clock)."""
        self.owner = owner
        """Id of this server process: the store refuses its phase closes and sums once the lease is lost."""
        self.query_id = query_id
        self.round_id = round_id
        self.session = session
        self.bits = bits
        self.members = members
        self.parties = {p: d for d, p in members.items()}
        self.phase_timeout_s = phase_timeout_s
        self.store = store
        self.metrics = metrics
        self.executor = executor
        self.on_end = on_end
        self.phase = int(session.phase)
        self.status: Literal["running", "finished", "aborted"] = "running"
        self.reason: str | None = None
        self.contributors: frozenset[int] = frozenset()
        self._outboxes: dict[int, tuple[int, dict[int, bytes]]] = {}
        self._accepted: dict[tuple[int, int], bytes] = {}
        """sha256 of each (phase, party) message the session accepted, so identical retries stay harmless."""
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        """Wakes the phase driver before its timer: every awaited answer is in, or a member withdrew."""
        self._arrivals = Arrivals()
        self._changed = asyncio.Event()
        self.started = self.clock.time()
        self.phase_opened = self.started
        """Wall-clock time the open phase opened (its deadline is this + phase_timeout_s)."""
        self.ended: float | None = None
        self.mode = spec.protocol.name
        self.config = spec.config
        self.secagg_dict: dict[str, Any] = spec.config.to_dict() if spec.config is not None else {}
        self.task_digest = spec.task_digest
        self.assignments: dict[str, Assignment] = dict(spec.assignments)
        self._released: set[str] = set()
        self.validation = spec.validation
        self.sum_check = spec.sum_check
        self.kind_dim = spec.kind_dim
        self.shortfall_note = spec.shortfall_note
        self.withdrawn: set[int] = set()
        """Parties whose device refused the assignment (its own policy): no phase waits for them."""
        self.refusals: Counter[str] = Counter()

    @classmethod
    def from_plan(
        cls, plan: CohortPlan, identities: Mapping[str, bytes], tokens: Mapping[str, bytes], store: Store,
        metrics: Metrics, executor: Executor, on_end: Callable[[CohortRuntime], None], owner: str | None = None,
        clock: Clock | None = None,
    ) -> CohortRuntime:
        """The runtime of a planned cohort: its protocol's session (`plan.protocol.server_session`) over the
        members' identity keys and — when every member has one — their identity tokens (relayed with the routed
        shares: a device that pins the issuer's keys counts toward its floor only peers whose token it verified),
        and the proof checks of its statement."""
        checks = None if plan.statement is None else CohortValidation(
            plan.statement, plan.query_id, plan.round_index, plan.session_id, plan.task_digest)
        held = {p: tokens[d] for d, p in plan.members.items() if d in tokens}
        session = plan.protocol.server_session(SessionInputs(
            plan.config, {p: identities[d] for d, p in plan.members.items()},
            held if len(held) == plan.n else None, plan.task_digest, checks.validator if checks else None))
        spec = CohortSpec(
            protocol=plan.protocol, config=plan.config, task_digest=plan.task_digest, validation=checks,
            sum_check=plan.sum_check, kind_dim=plan.kind_dim, assignments=plan.assignments,
            shortfall_note=plan.shortfall_note, failed_opening=plan.failed_opening)
        return cls(plan.cohort_id, plan.query_id, plan.round_id, session, plan.bits, dict(plan.members),
                   plan.phase_timeout_s, store, metrics, executor, on_end, owner=owner, clock=clock, spec=spec)

    # -- device side ----------------------------------------------------------------------------

    @cached_property
    def message_limit(self) -> int:
        """Largest phase message a member can legitimately send in this cohort (bytes)."""
        return self.session.max_message_size(self.validation.proof_bytes if self.validation is not None else 0)

    def snapshot(self) -> dict[str, Any]:
        """The running cohort as status views show it: open phase, members, parties still expected in it and
        how many of them answered, and when the phase closes at the latest (unix time)."""
        return {
            "id": self.id,
            "phase": Phase(self.phase).label,
            "devices": len(self.members),
            "expected": len(self.session.expected()),
            "answered": self.session.received_count(),
            "phase_opened_at": self.phase_opened,
            "deadline_at": self.phase_opened + self.phase_timeout_s,
        }

    def still_expects(self, device_id: str) -> bool:
        party = self.members.get(device_id)
        return self.status == "running" and party is not None and party in self.session.expected()

    async def submit(self, device_id: str, phase: int, data: bytes) -> None:
        party = self._party(device_id)
        digest = hashlib.sha256(data).digest()
        accepted = self._accepted.get((phase, party))
        if accepted == digest:
            return  # a retry of a message already accepted (possibly after its phase closed) is harmless
        if accepted is not None:  # also after the phase closed: the answer must not depend on timing
            raise Conflict(f"conflicting message: party {party} already sent a different message for phase {Phase(phase).label}")
        if self.status != "running":
            raise Gone(f"cohort {self.id} is {self.status}" + (f": {self.reason}" if self.reason else ""))
        if self.validation is not None and phase == Phase.MASKED_INPUT and phase == self.phase:
            if party not in self.session.expected():  # dropped, or its proof was refused: no more verifying for it
                raise Gone(f"party {party} was dropped from cohort {self.id}")
            # verified in batches in the executor, outside the lock (the session finds the result when it accepts
            # the message)
            await self.validation.preverify(party, data, self.executor)
        async with self._lock:
            if party not in self.session.expected():  # before the phase check: a late answer learns it was dropped
                raise Gone(f"party {party} was dropped from cohort {self.id} (missed a deadline)")
            if phase != self.phase:
                raise Conflict(f"phase {phase} is not open; the cohort is in phase {self.phase} ({Phase(self.phase).label})")
            try:
                if len(data) > OFFLOAD_BYTES or (self.validation is not None and phase == Phase.MASKED_INPUT):
                    await asyncio.get_running_loop().run_in_executor(self.executor, self.session.receive, party, data)
                else:
                    self.session.receive(party, data)
            except ConflictError as exc:
                raise Conflict(f"conflicting message: {exc}") from None
            except InvalidInputError as exc:
                self.metrics.proofs_refused += 1
                log.warning("cohort %s: device %s excluded from query %s: %s", self.id, device_id, self.query_id, exc)
                await self.store.queries.exclude_device(self.query_id, device_id, f"validity proof refused: {exc}")
                raise Invalid(f"masked input refused: {exc}; this device is dropped from the cohort and "
                              "left out of the rest of the query") from None
            except (SecAggError, ValueError) as exc:
                raise Malformed(f"bad secagg message for phase {Phase(phase).label}: {exc}") from None
            self._accepted[(phase, party)] = digest
            self._arrivals.add(asyncio.get_running_loop().time())
            if not self._awaited():  # the driver wakes for the last answer; the others only move the stall clock
                self._wake.set()

    async def advertise_from_checkin(self, device_id: str, c_pk: bytes, s_pk: bytes, signature: bytes = b"") -> bool:
        """Take the public keys a member sent with its check-in as its advertise-keys message (docs/protocol.md,
        "Keys with the check-in"): the server builds the message a device would have POSTed for phase 0, so the
        device saves that round trip. The keys carry the device's session-free signature over them (bound to the
        session and its task digest it signs them again with its share keys), so this works in both threat models,
        while phase 0 is open. False when the keys were not taken (the device then runs the phase itself and learns
        why there): no signature, a bad one, a repeated or low-order key, phase 0 closed."""
        config = self.spec.config
        if config is None or self.phase != Phase.ADVERTISE_KEYS:  # a protocol without this phase never opens it
            return False
        party = self._party(device_id)
        message = AdvertiseKeys(config.session_id, party, c_pk, s_pk, signature).encode()
        try:
            await self.submit(device_id, Phase.ADVERTISE_KEYS, message)
        except RequestError:
            return False
        return True

    async def next_message(self, device_id: str, phase: int, wait_s: float) -> NextMessage:
        party = self._party(device_id)
        deadline = self.clock.monotonic() + wait_s
        while True:
            if self.status == "aborted":
                raise Gone(f"cohort {self.id} aborted: {self.reason}")
            box = self._outboxes.get(phase)
            if box is not None:
                next_phase, messages = box
                msg = messages.get(party)
                if msg is not None:
                    return NextMessage("message", msg, next_phase)
                if next_phase == Phase.DONE:
                    return NextMessage("finished", phase=next_phase, contributed=party in self.contributors)
                raise Gone(f"party {party} was dropped from cohort {self.id} in phase {Phase(phase).label}")
            if phase != self.phase or self.status != "running":
                raise Conflict(f"no message after phase {phase}; the cohort is in phase {self.phase}")
            remaining = deadline - self.clock.monotonic()
            if remaining <= 0:
                return NextMessage("pending")
            changed = self._changed
            try:
                async with asyncio.timeout(remaining):  # no task per waiter (wait_for wraps the coroutine in one)
                    await changed.wait()
            except TimeoutError:
                return NextMessage("pending")

    async def withdraw(self, device_id: str, reason: str) -> bool:
        """A member refused its assignment under its own policy: phases stop waiting for it and its device is
        free for other cohorts. False when it had already withdrawn."""
        party = self._party(device_id)
        if party in self.withdrawn:
            return False
        self.withdrawn.add(party)
        self.refusals[reason] += 1
        self._wake.set()  # the phase may now have every answer it can get
        if device_id not in self._released:
            self._released.add(device_id)
            await self.store.presence.release(self.id, [device_id])
        return True

    def _party(self, device_id: str) -> int:
        party = self.members.get(device_id)
        if party is None:
            raise Forbidden(f"device is not a member of cohort {self.id}")
        return party

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # -- driver ---------------------------------------------------------------------------------

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                started = loop.time()
                self.phase_opened = self.clock.time()
                await self._wait_for_answers(started)
                async with self._lock:
                    closing = self.session.phase
                    try:
                        out = await loop.run_in_executor(self.executor, self.session.close_phase)
                    except AbortError as exc:
                        short = self.shortfall_note if exc.have < exc.needed and not exc.detail else ""
                        await self._end_aborted(str(exc) + short)
                        return
                    try:
                        await self._record_closed(closing)
                    except QueryNotLive as exc:  # cancelled elsewhere or lease lost: nothing more goes out
                        await self._end_aborted(str(exc))
                        return
                    self.metrics.observe_phase(closing.label, loop.time() - started)
                    if self.session.phase is Phase.DONE and self.session.result is not None:
                        self.contributors = self.session.result.contributors
                    self._outboxes[int(closing)] = (int(self.session.phase), out)
                    for old in [p for p in self._outboxes if p < int(closing) - 1]:
                        del self._outboxes[old]
                    self.phase = int(self.session.phase)
                    self._arrivals = Arrivals()
                if self.session.phase is Phase.DONE:
                    await self._end_finished()
                    return
                self._notify()
                await self.store.cohorts.set_phase(self.id, self.phase)  # after waking the devices
                await self._release_dropped()
        except asyncio.CancelledError:
            await asyncio.shield(self._end_aborted(self.reason or "cancelled"))
            raise
        except Exception as exc:  # a bug must not leave devices stuck in a cohort
            log.exception("cohort %s failed", self.id)
            await asyncio.shield(self._end_aborted(f"internal error: {type(exc).__name__}: {exc}"))
            raise

    @cached_property
    def quorum(self) -> int:
        """Fewest answers a phase may close early with: the session's survivor threshold (≥ the round's need,
        hence ≥ t_min)."""
        return self.session.survivor_threshold

    async def _wait_for_answers(self, opened: float) -> None:
        """Until every expected party answered, the deadline, or arrivals stalled while the phase may close early.
        Answers do not wake this loop (a stall is a matter of time passing since the last one): it wakes when the
        last awaited answer arrives or a member withdraws, at the time the arrivals would have stalled, and every
        GRACE_MIN_S while the phase could not yet close early — a few times a phase, not once per answer."""
        loop = asyncio.get_running_loop()
        deadline = opened + self.phase_timeout_s
        while self._awaited():
            now = loop.time()
            if now >= deadline:
                return
            wake = deadline
            arrivals, received = self._arrivals, self.session.received_count()
            if arrivals.last is not None and self._may_close_early():
                if stalled(now, opened, arrivals, received, self.quorum):
                    self.metrics.early_closes += 1
                    log.info("cohort %s: %s closed early with %d of %d answers (arrivals stalled)", self.id,
                             Phase(self.session.phase).label, self.session.received_count(), len(self.session.expected()))
                    return
                wake = min(deadline, arrivals.last + grace(opened, arrivals, received))
            else:  # not closable yet: look again as answers accumulate
                wake = min(deadline, now + GRACE_MIN_S)
            self._wake.clear()
            if not self._awaited():
                return
            try:
                async with asyncio.timeout(max(0.0, wake - now) + 0.01):
                    await self._wake.wait()
            except TimeoutError:
                pass

    def _awaited(self) -> int:
        """Answers the open phase still waits for: expected parties that neither answered nor refused (O(refusers),
        not O(n): it runs at every arrival)."""
        expected, session = self.session.expected(), self.session
        refused = sum(1 for p in self.withdrawn if p in expected and not session.has_answered(p))
        return len(expected) - session.received_count() - refused

    def _may_close_early(self) -> bool:
        """Whether the open phase could close now without losing anything the protocol needs
        (SecAgg's `ServerSession.close_ready`: no abort, no answering party pruned, every needed secret recoverable)."""
        return self.session.close_ready()

    async def _release_dropped(self) -> None:
        """Free the members the session dropped (missed a deadline) so they may be seated elsewhere."""
        expected = self.session.expected()
        gone = [d for d, p in self.members.items() if p not in expected and d not in self._released]
        if gone:
            self._released.update(gone)
            await self.store.presence.release(self.id, gone)

    async def _record_closed(self, closing: Phase) -> None:
        """Store that the masked-input phase closed before any later phase's message goes out: from here on the
        server could learn the noisy sum, so the query's privacy charge is no longer refundable."""
        if closing is Phase.MASKED_INPUT:
            await self.store.cohorts.mark_masked_input_closed(self.id, self.owner)

    async def _end_aborted(self, reason: str, keep_seats: bool = False, failed: FailedOpening | None = None) -> None:
        if self.status != "running":
            return
        if self.refusals:  # say why the devices that refused did so: the query's error lists abort reasons
            reason += "; devices refused: " + ", ".join(
                r if n == 1 else f"{r} ×{n}" for r, n in sorted(self.refusals.items())
            )
        self.status, self.reason = "aborted", reason
        self.metrics.cohorts["aborted"] += 1
        self.ended = self.clock.time()
        self._notify()
        label = Phase(self.phase).label
        log.info("cohort %s of query %s aborted in phase %s after %.1f s: %s", self.id, self.query_id, label,
                 self.ended - self.started, reason,
                 extra=fields(event="cohort.aborted", cohort_id=self.id, query_id=self.query_id, phase=label,
                              reason=reason, seconds=round(self.ended - self.started, 3)))
        try:
            if failed is None:
                await self.store.cohorts.abort(self.id, reason, self.phase, keep_seats=keep_seats)
            else:
                out = await blame_service.abort_failed_opening(self.store, self.id, reason, failed)
                log.warning("cohort %s: %d contributors free to contribute again, %d kept seated%s; runs charged: %s; "
                            "named: %s", self.id, out.freed, out.kept, f" ({out.why_kept})" if out.why_kept else "",
                            out.runs, sorted(out.named) or "nobody",
                            extra=fields(event="cohort.failed_opening", cohort_id=self.id, query_id=self.query_id,
                                         freed=out.freed, kept=out.kept, runs=out.runs, named=sorted(out.named)))
                self.metrics.devices_named += len(out.named)
        finally:
            self.on_end(self)

    def _check_sum(self, total: np.ndarray, contributors: frozenset[int]) -> str | None:
        """The opening check of the proofs (when proved) and the plausibility check (always); None when the sum
        may be released."""
        if self.validation is not None:
            why = self.validation.opening(contributors, total)
            if why:
                return why
        if self.sum_check is not None:
            return self.sum_check(total[: self.kind_dim] if self.kind_dim is not None else total, len(contributors))
        return None

    async def _end_finished(self) -> None:
        result = self.session.result
        assert result is not None
        total = encoding.from_modular(result.vector, self.bits)
        refusal = await asyncio.get_running_loop().run_in_executor(self.executor, self._check_sum, total, result.contributors)
        if refusal is not None:  # the server has seen this sum: its devices join another only at a price (blame_store)
            self.metrics.cheating_detected += 1
            log.warning("cohort %s: %s", self.id, refusal)
            template = self.spec.failed_opening
            by_party = {p: d for d, p in self.members.items()}
            failed = None if template is None else dataclasses.replace(
                template, contributors=frozenset(by_party[p] for p in result.contributors if p in by_party))
            await self._end_aborted(refusal, keep_seats=True, failed=failed)
            return
        if self.kind_dim is not None:
            total = total[: self.kind_dim]
        dropped: dict[str, Any] = {Phase(p).label: sorted(v) for p, v in result.dropped.items() if v}
        try:
            await self.store.cohorts.finish(self.id, total, result.contributors, dropped, self.owner)
        except QueryNotLive as exc:  # cancelled or failed meanwhile: the sum is dropped, the cohort aborts
            await self._end_aborted(str(exc))
            return
        self.contributors = result.contributors
        self.status = "finished"
        self.ended = self.clock.time()
        lost = sum(len(v) for v in dropped.values())
        log.info("cohort %s of query %s finished in %.1f s: %d of %d devices contributed (%d dropped)", self.id,
                 self.query_id, self.ended - self.started, len(result.contributors), len(self.members), lost,
                 extra=fields(event="cohort.finished", cohort_id=self.id, query_id=self.query_id,
                              contributors=len(result.contributors), devices=len(self.members), dropped=dropped,
                              seconds=round(self.ended - self.started, 3)))
        self.metrics.cohorts["finished"] += 1
        self._notify()
        self.on_end(self)
