"""Runs queries: per query one asyncio task that plans rounds, forms cohorts, and decodes/finalizes.

Round r: `kind.plan_round` → stored Round (plan, noise, bit width, `need` contributors) → cohorts of
uniformly sampled free devices (Bernoulli `plan.sample_rate`, at most `cohort.max_clients`, each needing
≥ `need` survivors so every sum the server sees covers at least the minimum number of devices) until the
round's stored aggregate covers ≥ `need` contributors → `kind.decode_round` (with the round's noise as an
`AggregateNoise`) → next round or `kind.finalize` (with the server's stop reason, if it stopped the query),
whose `Release` is stored as the result with its uncertainty and warnings (`queries.uncertainty`; a release
that reports a `failure`, e.g. diverged training, marks the query failed and keeps the result readable).
Before a round starts, the accountant checks that its privacy weight still fits the query's ε (only a
query with an analyst-fixed noise multiplier can run out). The server reads nothing else of a kind's state or result.
Everything needed to continue is stored, so after a restart the task resumes from the database: cohorts
that were in flight are aborted ("server restarted"), finished sums stay, seats in finished cohorts keep
their devices out of the rest of the round.

Many processes may share one database (docs/scaling.md): a query runs in the process holding its lease
(`Store.acquire_query`), renewed every `heartbeat_s`; when a process stops heartbeating its leases lapse
after `lease_ttl_s` and another process takes its queries over exactly as after a restart. A process that
finds it lost a lease (or that the query was cancelled at another process) stops the query's task. A cohort
is stored with its members' claims in one transaction, so a process dying while one forms leaves no device
claimed for a cohort that does not exist; a process starting a query first frees what dead processes left
claimed (`Cohorts.release_abandoned`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from concurrent.futures import Executor
from dataclasses import asdict
from typing import Any

from analytics_server import blame, privacy, sampling, validation
from analytics_server.cluster import ProcessIdentity
from analytics_server.cohort import CohortRuntime
from analytics_server.cohort_plan import QueryContext, RoundContext, ServerTerms, plan_cohort
from analytics_server.db.models import Query, Round
from analytics_server.db.store import ClaimLost, QueryNotLive, Store, vec_from_bytes
from analytics_server.logs import fields
from analytics_server.metrics import Metrics
from analytics_server.noise_plan import round_need
from analytics_server.notify import ASSIGN, CANCEL, Notifier
from analytics_server.pool import DevicePool
from analytics_server.protocols import SECURE_AGGREGATION, CohortProtocol
from analytics_server.services import cohorts_service, queries_service
from analytics_server.settings import Settings
from queries import uncertainty
from queries.kind import AggregateNoise, RoundPlan
from queries.registry import get_kind
from queries.spec import QuerySpec
from fa_common.clock import SYSTEM_CLOCK, Clock
from secagg.phases import Phase
from secagg.randomness import OsRandom, RandomSource

log = logging.getLogger(__name__)
FORMATION_POLL_S = 0.1
FORMATION_STALL_S = 0.5
"""Once a round has enough eligible devices, its cohort forms when no new one arrived for this long (or at
`max_clients`, or after `cohort_formation_wait_s`): devices still checking in join, stragglers are not awaited."""
ENDED_KEEP_S = 600.0


def _context(q: Query) -> QueryContext:
    """The query's spec, kind and calibration (its DB columns), parsed once when its task starts."""
    spec = QuerySpec.model_validate(q.spec)
    return QueryContext(q.id, spec, q.spec, get_kind(spec.kind), privacy.stored_calibration(q.calibration),
                        q.rounds_upper_bound)


def _round_context(rnd: Round) -> RoundContext:
    """A stored round's plan and noise (its DB columns), parsed once."""
    return RoundContext(rnd.id, rnd.index, RoundPlan(**rnd.plan), privacy.stored_noise(rnd.noise), rnd.bits, rnd.need)


class QueryFailed(Exception):
    """A query that cannot continue; the message is stored as the query's error."""


class Orchestrator:
    def __init__(
        self, store: Store, settings: Settings, pool: DevicePool, metrics: Metrics, executor: Executor,
        process: ProcessIdentity, notifier: Notifier, randomness: RandomSource | None = None,
        clock: Clock | None = None, protocol: CohortProtocol = SECURE_AGGREGATION,
    ) -> None:
        """`protocol`: how every cohort aggregates (`analytics_server.protocols`) — secure aggregation, or the
        benchmark's unmasked session (`protocols.for_benchmark`: only `make bench` builds a server so, to measure
        what masking costs; no query or assignment field can select it, and a device runs it only when built with
        the benchmark's hooks)."""
        self.store = store
        self.protocol = protocol
        self.terms = ServerTerms(process.assignment_url, settings.failed_opening_extra_runs, settings.blame_quorum,
                                 settings.default_budget())
        """What the settings and this process add to every cohort (`cohort_plan.plan_cohort`)."""
        self.settings = settings
        self.pool = pool
        self.metrics = metrics
        self.executor = executor
        self.process = process
        self.notifier = notifier
        self.randomness = randomness or OsRandom()  # session ids and cohort sampling
        self.clock: Clock = clock or SYSTEM_CLOCK  # cohort formation deadlines, ended-cohort pruning, cohort stamps
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.cohorts: dict[str, CohortRuntime] = {}
        self.live: dict[str, dict[str, Any]] = {}
        self._coins: dict[int, dict[str, bool]] = {}
        self._held: set[str] = set()
        """Queries whose lease this process acquired and whose task runs."""
        self._stop_reason: dict[str, str] = {}
        self._stored_progress: dict[str, dict[str, Any]] = {}
        self._stopping = False
        self._beat: asyncio.Task[None] | None = None
        self.cluster_running = 0
        notifier.subscribe(CANCEL, self._on_cancel)

    async def start(self) -> None:
        p = self.process
        await self.store.cluster.register_process(p.id, p.name, p.url, p.host, p.pid)
        if p.single:  # SQLite: no other process can be running these
            aborted = await self.store.cohorts.abort_running("server restarted")
            if aborted:
                log.info("aborted %d cohorts that were in flight before the restart", aborted)
            await self._release_abandoned()
        for qid in await self.store.cluster.unleased_queries() if not p.single else [
            q.id for q in await self.store.queries.with_status(("pending", "running"))
        ]:
            self.spawn(qid)
        self.cluster_running = await self.store.cluster.count_active_queries()
        self._beat = asyncio.create_task(self._heartbeat_loop(), name="heartbeat")

    async def stop(self) -> None:
        """Graceful shutdown: running cohorts abort ("server shutting down"), the leases are released, and the
        queries resume at once in another process (or at the next start)."""
        self._stopping = True
        if self._beat is not None:
            self._beat.cancel()
        for task in list(self.tasks.values()):
            task.cancel()
        for task in list(self.tasks.values()):
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        try:
            await self.store.cluster.stop_process(self.process.id)
        except Exception as exc:
            log.warning("could not release leases at shutdown: %s", exc)

    def spawn(self, query_id: str) -> None:
        """Run the query here if this process can take its lease (else another process runs it)."""
        if query_id in self.tasks or self._stopping:
            return
        self.tasks[query_id] = asyncio.create_task(self._run_query(query_id), name=f"query-{query_id}")

    async def cancel(self, query_id: str) -> bool:
        """Stop the query's task and with it its cohorts, then mark it cancelled; the refund decision (in the
        same transaction as the status) thus sees every masked-input phase that closed. Shielded, so a caller
        that goes away does not leave a stopped query marked running. False when it was already terminal.

        A query run by another process is marked cancelled first (the store orders that decision against the
        owner closing a masked-input phase) and its owner is told to stop it."""
        return await asyncio.shield(self._cancel(query_id))

    async def _cancel(self, query_id: str) -> bool:
        task = self.tasks.get(query_id)
        if task is not None:
            self._stop_reason[query_id] = "query cancelled"
            task.cancel()
            await asyncio.wait({task})  # its cohorts end (aborted: "query cancelled") before it does
        done = await queries_service.set_status(self.store, query_id, "cancelled")
        if done and task is None and self.notifier.shared:
            await self.notifier.publish(CANCEL, query_id)
        return done

    def _on_cancel(self, query_id: str) -> None:
        task = self.tasks.get(query_id)
        if task is not None and not task.done():
            self._stop_reason[query_id] = "query cancelled"
            task.cancel()

    # -- leases ---------------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            await asyncio.sleep(self.settings.heartbeat_s)
            try:
                await self._heartbeat()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database may be briefly unreachable: try again next beat
                log.warning("heartbeat failed: %s", exc)
                continue
            gap, last = loop.time() - last, loop.time()
            if gap > self.settings.lease_ttl_s:
                log.warning("heartbeat %.1f s after the previous one (lease TTL %g s): this process is overloaded; "
                            "another process may take over its queries (FA_LEASE_TTL_S)", gap, self.settings.lease_ttl_s)

    async def _heartbeat(self) -> None:
        """Renew this process's row and leases, stop queries whose lease was lost, take over unleased ones,
        and store live progress for the other processes' status pages."""
        await self.store.cluster.heartbeat(self.process.id, self.load())
        # only queries held before the renewal started can have lost their lease in it: one acquired while the
        # renewal ran (its UPDATE did not see that lease yet) would otherwise be taken for lost and its task stopped,
        # leaving the query pending under this process's lease, renewed but run by no one
        before = set(self._held)
        held = await self.store.cluster.renew_leases(self.process.id, self.settings.lease_ttl_s)
        for qid in sorted(before - held):
            task = self.tasks.get(qid)
            if task is not None and not task.done():
                q = await self.store.queries.get(qid)
                lost = q is None or q.status not in ("pending", "running")
                self._stop_reason[qid] = "query cancelled" if lost else "the query moved to another server process"
                log.warning("query %s: lease lost or query ended elsewhere; stopping it here", qid)
                task.cancel()
            self._held.discard(qid)
        for qid in await self.store.cluster.unleased_queries():
            self.spawn(qid)
        for qid in self._held:
            live = self.live.get(qid)
            if live is not None:  # the running cohort as other processes' status views show it
                cohort = self.cohorts.get(live.get("cohort") or "")
                live["cohort_live"] = cohort.snapshot() if cohort is not None and cohort.status == "running" else None
        changed = {qid: dict(live) for qid, live in self.live.items()
                   if qid in self._held and self._stored_progress.get(qid) != live}
        if changed:
            await self.store.cluster.store_progress(changed, self.process.id)
            self._stored_progress.update(changed)
        self.cluster_running = await self.store.cluster.count_active_queries()

    async def _release_abandoned(self) -> None:
        """Before running a query: free the devices a dead process left claimed (`Cohorts.release_abandoned`), so
        that one crash mid-formation cannot keep the fleet out of this and every later query."""
        ended, claims = await self.store.cohorts.release_abandoned(self.settings.lease_ttl_s)
        if ended or claims:
            log.warning("freed devices a dead server process left claimed: aborted %d cohorts of ended queries, "
                        "released %d claims naming no running cohort", ended, claims)

    def load(self) -> dict[str, Any]:
        return {
            "queries": len(self._held),
            "cohorts": sum(1 for c in self.cohorts.values() if c.status == "running"),
            "devices_waiting": self.pool.waiting(),
            "checkins": self.metrics.checkins,
        }

    def running_count(self) -> int:
        """Running queries in the whole cluster (as of the last heartbeat, or this process's if more)."""
        return max(self.cluster_running, len(self._held))

    # -- per query ------------------------------------------------------------------------------

    async def _run_query(self, query_id: str) -> None:
        try:
            p = self.process
            if not await self.store.cluster.acquire_query(query_id, p.id, self.settings.lease_ttl_s):
                return  # another process holds it
            self._held.add(query_id)
            aborted = await self.store.cohorts.abort_running("server restarted", query_id=query_id, keep_owner=p.id)
            if aborted:
                log.info("query %s: taken over; aborted %d cohorts of the process that ran it", query_id, aborted)
            await self._release_abandoned()
            q = await self.store.queries.get(query_id)
            if q is None or q.status not in ("pending", "running"):
                return
            if q.status == "pending":
                await queries_service.set_status(self.store, query_id, "running")
            await self._drive(q)
        except asyncio.CancelledError:
            raise
        except QueryNotLive as exc:  # ended, or taken over, while a cohort formed: nothing of it was stored
            log.warning("query %s: stopping here: %s", query_id, exc)
        except QueryFailed as exc:
            await queries_service.set_status(self.store, query_id, "failed", str(exc))
        except Exception as exc:
            log.exception("query %s failed", query_id)
            await queries_service.set_status(self.store, query_id, "failed", f"internal error: {type(exc).__name__}: {exc}")
        finally:
            self.tasks.pop(query_id, None)
            self.live.pop(query_id, None)
            self._held.discard(query_id)
            self._stop_reason.pop(query_id, None)
            self._stored_progress.pop(query_id, None)

    async def _drive(self, q: Query) -> None:
        ctx = _context(q)
        spec, kind = ctx.spec, ctx.kind
        params = kind.parse_params(spec.params)
        state = kind.state_from_json(q.state)
        index = q.current_round
        live = self.live.setdefault(q.id, {})
        spent = sum(privacy.round_weight(r.noise) for r in await self.store.rounds.summaries(q.id)
                    if r.index < index)
        while True:
            rnd = await self.store.rounds.get(q.id, index)
            if rnd is None:
                try:
                    plan = kind.plan_round(params, state, index)
                except ValueError as exc:
                    raise QueryFailed(f"round {index}: planning failed: {exc}") from None
                if plan is None:
                    await self._finish(ctx, params, state)
                    return
                if not privacy.budget_allows(ctx.calibration, spent + plan.privacy_weight):  # ε would be exceeded:
                    await self._finish(ctx, params, state, "privacy budget exhausted")  # stop before it runs
                    return
                rnd = await self._new_round(ctx, plan, index)
            round_ctx = _round_context(rnd)
            spent += privacy.round_weight(round_ctx.noise)
            plan = round_ctx.plan
            live.update(round=index, need=rnd.need, contributors=rnd.contributors, phase=None)
            while rnd.contributors < rnd.need:
                await self._run_cohort(ctx, rnd, round_ctx, live)
                fresh = await self.store.rounds.by_id(rnd.id)
                assert fresh is not None
                rnd = fresh
                live.update(contributors=rnd.contributors)
            if (cal := ctx.calibration) is not None and rnd.contributors < cal.t_min:
                raise QueryFailed(f"round {index}: {rnd.contributors} contributors, fewer than t_min; nothing released")
            aggregate = privacy.unscale(round_ctx.noise, vec_from_bytes(rnd.aggregate))  # ÷ encoding scale
            noise = await self._realized_noise(ctx, rnd, round_ctx)
            decode = functools.partial(kind.decode_round, params, state, plan, aggregate, rnd.contributors, noise)
            try:  # kinds may do real work here (model updates): keep it off the event loop
                state = await asyncio.get_running_loop().run_in_executor(self.executor, decode)
            except ValueError as exc:
                raise QueryFailed(f"round {index}: decode failed: {exc}") from None
            index += 1
            await self.store.rounds.decode(rnd.id, q.id, kind.state_to_json(state), index)
            log.info("query %s: round %d decoded over %d contributors", q.id, index - 1, rnd.contributors,
                     extra=fields(event="round.decoded", query_id=q.id, round=index - 1, contributors=rnd.contributors))
            self._coins.pop(rnd.id, None)

    async def _finished_cohorts(self, rnd: Round) -> list[tuple[int, int]]:
        """(devices, contributors) of each finished cohort of the round: what sized and drew its noise."""
        if rnd.noise is None:
            return []
        return [(c.n, c.contributors) for c in await self.store.cohorts.of_round(rnd.id) if c.status == "finished"]

    async def _realized_noise(self, q: QueryContext, rnd: Round, round_ctx: RoundContext) -> AggregateNoise | None:
        """The noise in the round's aggregate as its finished cohorts drew it (each sized for its own t_c)."""
        return privacy.realized_noise(q.spec, q.calibration, round_ctx.plan, round_ctx.noise,
                                      await self._finished_cohorts(rnd))

    async def _new_round(self, q: QueryContext, plan: RoundPlan, index: int) -> Round:
        spec = q.spec
        need = round_need(spec, plan, q.calibration)  # every sum the server sees covers ≥ t_min noise shares
        if need > spec.cohort.max_clients:
            raise QueryFailed(f"round {index} needs {need} clients but cohort.max_clients is {spec.cohort.max_clients}")
        planned = privacy.round_noise(q.calibration, plan, spec)
        try:
            bits = privacy.choose_bits(spec.cohort.max_clients, plan, planned)
            statement = validation.round_statement(spec, q.kind, plan, planned, q.calibration)
            bits = validation.round_bits(bits, spec.cohort.max_clients, statement)
        except ValueError as exc:
            raise QueryFailed(f"round {index}: {exc}") from None
        stored_plan = asdict(plan)
        return await self.store.rounds.create(q.id, index, stored_plan, planned, bits, need, plan.dim)

    async def _finish(self, q: QueryContext, params: Any, state: Any, stop_reason: str | None = None) -> None:
        spec, kind = q.spec, q.kind
        try:
            release = await asyncio.get_running_loop().run_in_executor(
                self.executor, functools.partial(kind.finalize, params, state, stop_reason)
            )
        except ValueError as exc:
            raise QueryFailed(f"finalize failed: {exc}") from None
        rounds = await self.store.rounds.summaries(q.id)
        noises = [r.noise for r in rounds]
        contributors = [r.contributors for r in rounds]
        bits = [r.bits for r in rounds]
        purposes = [(r.plan or {}).get("purpose") for r in rounds]
        thresholds: dict[str, Any] = {"min_contributors": spec.cohort.min_clients, **release.thresholds}
        budget = None
        if q.calibration is not None:
            budget = (await self.store.budgets.get(spec.source, self.settings.default_budget())).to_dict()
        stored = [await self.store.rounds.get(q.id, i) for i in range(len(noises))]
        parsed = [None if r is None else _round_context(r) for r in stored]
        realized = [None if r is None or c is None else privacy.realized_block(
            spec, q.calibration, c.plan, c.noise, await self._finished_cohorts(r)) for r, c in zip(stored, parsed)]
        block = privacy.privacy_block(
            spec, q.calibration, noises, contributors, bits, thresholds, budget, purposes, realized)
        statements = [None if c is None else validation.round_statement(spec, kind, c.plan, c.noise, q.calibration)
                      for c in parsed]
        block.update(validation.privacy_fields(spec, statements))
        if q.calibration is not None:
            block["delta"] = spec.privacy.delta  # calibrated δ plus the truncation share (validation)
        block.update(kind.privacy(params) or {})  # a kind's own guarantee (TrieHH) over the no-noise block
        block["identities"] = "issuer" if self.settings.has_issuer() else "open"  # open: Sybil-unsafe (identities.md)
        block["devices_excluded"] = len(await self.store.queries.excluded_devices(q.id))  # refused proofs, failed openings
        failed, runs = await self.store.blame.failed_summary(q.id)
        if failed:  # docs/validation.md, "A failed opening"
            block["failed_openings"] = failed
            if runs is not None:
                block["runs_charged"] = runs
        values, warnings = uncertainty.describe(release)
        warnings = validation.trust_warnings(block) + warnings
        await queries_service.finish(self.store, q.id, release.result, block, values, warnings, failure=release.failure)

    # -- cohorts --------------------------------------------------------------------------------

    async def _eligible(self, rnd: Round, plan: RoundPlan, seated: set[str], cap: int) -> list[str]:
        """Free devices without a seat in the round, not excluded from the query (a refused validity proof, a
        failed-opening group test), that passed the round's sampling coin (a keyed function of the round's stored
        secret and the device id, so the same after a restart; cached per round) — in the order a cohort of at most
        `cap` takes them (`blame.candidates`: after failed openings, suspects are spread out)."""
        coins = self._coins.setdefault(rnd.id, {})
        excluded = await self.store.queries.excluded_devices(rnd.query_id)
        out = []
        for d in await self.store.presence.available():
            if d in seated or d in excluded:
                continue
            if plan.sample_rate < 1.0:
                if d not in coins:
                    assert rnd.sampling_secret is not None, "sampled round without a sampling secret"
                    coins[d] = sampling.sampled(rnd.sampling_secret, d, plan.sample_rate)
                if not coins[d]:
                    continue
            out.append(d)
        failed = [g for g in (await self.store.blame.failed_groups(rnd.query_id)).values() if g.isdisjoint(excluded)]
        return blame.candidates(out, failed, cap, self.randomness.sample)

    async def _run_cohort(self, q: QueryContext, rnd: Round, round_ctx: RoundContext, live: dict[str, Any]) -> None:
        plan = round_ctx.plan
        if plan.sample_rate < 1.0 and rnd.sampling_secret is None:
            rnd.sampling_secret = await self.store.rounds.sampling_secret(rnd.id, sampling.new_secret())
        seated = await self.store.rounds.members(rnd.id)
        live.update(phase="forming")
        cohort, wire = await self._form(q, rnd, round_ctx, seated, live)
        members = cohort.members
        self.pool.deliver(wire)
        log.info("cohort %s formed for query %s round %d: %d devices (need %d survivors, %s)", cohort.id, q.id,
                 rnd.index, len(members), rnd.need, cohort.mode,
                 extra=fields(event="cohort.formed", cohort_id=cohort.id, query_id=q.id, round=rnd.index,
                              devices=len(members), need=rnd.need))
        if self.notifier.shared:
            await self.notifier.publish(ASSIGN, cohort.id)
        live.update(phase=Phase(cohort.phase).label, cohort=cohort.id, cohort_size=len(members))
        task = asyncio.create_task(cohort.run(), name=f"cohort-{cohort.id}")
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cohort.reason = "server shutting down" if self._stopping else self._stop_reason.get(q.id, "query cancelled")
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
            raise
        except Exception:
            pass  # recorded as an aborted cohort by the runtime; the round forms another
        live.update(phase=None, cohort=None)
        self._count_abort(cohort, live)

    async def _form(
        self, q: QueryContext, rnd: Round, round_ctx: RoundContext, seated: set[str], live: dict[str, Any]
    ) -> tuple[CohortRuntime, dict[str, dict[str, Any]]]:
        """Wait until enough eligible devices are available, sample up to `max_clients` of them, and store the
        cohort with their claims (`_store_cohort`; another process may claim some first: then try again). Returns
        the stored cohort and its members' assignments (device → wire JSON)."""
        spec, plan = q.spec, round_ctx.plan
        need, cap = rnd.need, spec.cohort.max_clients
        enough_since: float | None = None
        grown_at, last_count = self.clock.monotonic(), -1
        timeout = self._formation_timeout(spec)
        deadline = self.clock.monotonic() + timeout
        while True:
            pause = FORMATION_POLL_S
            available = await self.store.presence.count_available()  # an upper bound on the eligible: no rows fetched
            if available >= need:
                t0 = self.clock.monotonic()
                eligible = await self._eligible(rnd, plan, seated, cap)
                # listing a large fleet is not free: spend at most a fifth of the time on it
                pause = max(pause, 4 * (self.clock.monotonic() - t0))
            else:
                eligible = []
            live["devices_eligible"] = len(eligible) if available >= need else available  # else an upper bound
            if len(eligible) > last_count:
                grown_at, last_count = self.clock.monotonic(), len(eligible)
            if len(eligible) >= need:
                now = self.clock.monotonic()
                enough_since = enough_since or now
                if (len(eligible) >= cap or now - enough_since >= self.settings.cohort_formation_wait_s
                        or now - grown_at >= max(FORMATION_STALL_S, 2 * pause)):
                    chosen = eligible[:cap]  # in `blame.candidates` order: a uniform sample when nothing failed
                    formed = await self._store_cohort(q, rnd, round_ctx, chosen)
                    if formed is not None:
                        return formed
                    enough_since = None
            else:
                enough_since, last_count = None, -1
                if self.clock.monotonic() >= deadline:
                    found = f"{len(eligible)} eligible" if available >= need else f"only {available} available"
                    raise QueryFailed(
                        f"no cohort formed within {timeout:g} s: {found} devices, need {need} "
                        f"(round {rnd.index}; cohort.formation_timeout_s)"
                    )
            await asyncio.sleep(pause)

    async def _store_cohort(
        self, q: QueryContext, rnd: Round, round_ctx: RoundContext, chosen: list[str]
    ) -> tuple[CohortRuntime, dict[str, dict[str, Any]]] | None:
        """Build a cohort of `chosen` and store it together with its members' claims, in one transaction
        (`cohorts_service.create_cohort(claim=True)`): a process that dies at any step leaves no claim naming a cohort that
        does not exist. The cohort is built before its claims (its size, parties, keys and assignments follow from
        its members); when another cohort claimed some member first, or its availability lapsed, nothing was stored
        and the cohort is built again without those devices while at least `need` remain (None when fewer do)."""
        identities = await self.store.devices.keys(chosen)
        keys = {d: k for d, (k, _) in identities.items()}
        tokens = {d: t for d, (_, t) in identities.items() if t is not None}
        while len(chosen) >= rnd.need:
            session_id = self.randomness.bytes(16)
            members = {d: i + 1 for i, d in enumerate(chosen)}
            cohort = self._make_cohort(q, round_ctx, members, session_id, keys, tokens)
            self.cohorts[cohort.id] = cohort  # before the commit: a member told by another process may ask at once
            wire = {d: a.model_dump(mode="json", exclude_none=True) for d, a in cohort.assignments.items()}
            try:
                await cohorts_service.create_cohort(
                    self.store, cohort.id, q.id, rnd.id, cohort.secagg_dict, cohort.mode, members, cohort.phase,
                    owner=self.process.id, assignments=wire, claim=True,
                    task=(rnd.index, cohort.task_digest, cohort.config.public_summary() if cohort.config else {}),
                )
            except ClaimLost as exc:
                self.cohorts.pop(cohort.id, None)
                chosen = [d for d in chosen if d not in exc.lost]
                continue
            except BaseException:  # cancelled (the shielded transaction may still have committed) or failed
                self.cohorts.pop(cohort.id, None)
                reason = "server shutting down" if self._stopping else self._stop_reason.get(q.id, "query cancelled")
                await asyncio.shield(self.store.cohorts.abort(cohort.id, reason))  # frees its devices if stored
                raise
            return cohort, wire
        return None

    def _formation_timeout(self, spec: QuerySpec) -> float:
        """Seconds a cohort may take to form: the spec's cohort.formation_timeout_s or the server default."""
        return spec.cohort.formation_timeout_s or self.settings.cohort_formation_timeout_s

    def _count_abort(self, cohort: CohortRuntime, live: dict[str, Any]) -> None:
        """Fail the query after `max_consecutive_aborts` aborted cohorts in a row (a finished one resets the
        count), naming the abort reasons, so a query whose cohorts cannot succeed (devices refusing its task,
        too much dropout for its minimum) does not re-form cohorts forever while holding its charge."""
        reasons: list[str] = live.setdefault("abort_reasons", [])
        if cohort.status != "aborted":
            reasons.clear()
            return
        reasons.append(cohort.reason or "unknown reason")
        limit = self.settings.max_consecutive_aborts
        if len(reasons) >= limit:
            counts: dict[str, int] = {}
            for r in reasons[-limit:]:
                counts[r] = counts.get(r, 0) + 1
            causes = "; ".join(r if n == 1 else f"{r} (×{n})" for r, n in counts.items())
            reasons.clear()
            raise QueryFailed(f"{limit} consecutive cohorts aborted (max_consecutive_aborts); last reasons: {causes}")

    def _make_cohort(
        self, q: QueryContext, rnd: RoundContext, members: dict[str, int], session_id: bytes,
        keys: dict[str, bytes], tokens: dict[str, bytes] | None = None,
    ) -> CohortRuntime:
        """The cohort of `members` as planned (`cohort_plan.plan_cohort`), run by this server's protocol; `keys` and
        `tokens`: the members' identity keys and tokens (`CohortRuntime.from_plan`)."""
        plan = plan_cohort(q, rnd, members, session_id, self.protocol, self.terms)
        return CohortRuntime.from_plan(plan, keys, tokens or {}, self.store, self.metrics, self.executor,
                                       self._cohort_ended, owner=self.process.id, clock=self.clock)

    def _cohort_ended(self, cohort: CohortRuntime) -> None:
        """The runtime stays reachable for a while so late pollers learn the outcome (the store freed the
        devices when it recorded the end)."""
        cutoff = self.clock.time() - ENDED_KEEP_S
        for cid in [c.id for c in self.cohorts.values() if c.ended is not None and c.ended < cutoff]:
            del self.cohorts[cid]
