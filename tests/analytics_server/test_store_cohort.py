"""Storage invariants and the cohort runtime driven in process (no HTTP): exact sums, drops, aborts."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy.exc import IntegrityError

from analytics_server.cohort import (
    GAP_MARGIN,
    GRACE_FACTOR,
    GRACE_GAPS,
    GRACE_MIN_S,
    Arrivals,
    CohortRuntime,
    CohortSpec,
    grace,
    stalled,
)
from analytics_server.db.engine import make_engine
from analytics_server.db.store import QueryNotLive, Store, vec_from_bytes
from analytics_server.metrics import Metrics
from analytics_server.services import cohorts_service, queries_service
from fa_common.clock import Clock, ManualClock
from fa_common.errors import Conflict, Gone
from secagg import ClientSession, SecAggConfig, ServerSession, encoding
from secagg.crypto import ed25519_public_bytes
from secagg.messages import PeerKeys, decode
from secagg.phases import Phase

async def _setup(url: str, n: int, dim: int = 3) -> tuple[Store, str, int, list[str]]:
    store = Store(make_engine(url))
    q = await queries_service.submit(store, "histogram", None, "words", {}, {}, 1, None, None)
    r = await store.rounds.create(q.id, 0, {}, None, 20, need=2, dim=dim)
    devices = [f"dev{i:03d}" for i in range(n)]
    for d in devices:
        await store.devices.register(d, d.encode().ljust(32, b"\0"))
    return store, q.id, r.id, devices


async def test_seats_unique_per_round_and_freed_on_abort(migrated_url: str) -> None:
    store, qid, rid, devs = await _setup(migrated_url, 4)
    await cohorts_service.create_cohort(store, "c1", qid, rid, {}, "secagg", {devs[0]: 1, devs[1]: 2})
    with pytest.raises(IntegrityError):
        await cohorts_service.create_cohort(store, "c2", qid, rid, {}, "secagg", {devs[1]: 1, devs[2]: 2})
    assert await store.rounds.members(rid) == {devs[0], devs[1]}
    assert await store.cohorts.abort_running("server restarted") == 1
    assert await store.rounds.members(rid) == set()
    (c1,) = await store.cohorts.of_round(rid)
    assert (c1.status, c1.reason, c1.phase) == ("aborted", "server restarted", Phase.ADVERTISE_KEYS)
    await cohorts_service.create_cohort(store, "c3", qid, rid, {}, "secagg", {devs[1]: 1, devs[2]: 2})
    await store.engine.dispose()


async def test_cohort_rows_record_their_phase(migrated_url: str) -> None:
    """A running cohort's row follows its phases (one `cohort.phase` event each); an abort keeps the phase
    that failed (given, or the last recorded one after a restart); a finished cohort says done."""
    store, qid, rid, devs = await _setup(migrated_url, 6)
    await cohorts_service.create_cohort(store, "c1", qid, rid, {}, "secagg", {devs[0]: 1, devs[1]: 2})
    await cohorts_service.create_cohort(store, "c2", qid, rid, {}, "plain", {devs[2]: 1, devs[3]: 2}, phase=Phase.MASKED_INPUT)
    await cohorts_service.create_cohort(store, "c3", qid, rid, {}, "secagg", {devs[4]: 1, devs[5]: 2})
    await store.cohorts.set_phase("c1", Phase.SHARE_KEYS)
    await store.cohorts.set_phase("c3", Phase.SHARE_KEYS)
    await store.cohorts.abort("c1", "too few", Phase.SHARE_KEYS)
    await store.cohorts.set_phase("c1", Phase.MASKED_INPUT)  # too late: the cohort already ended
    await store.cohorts.finish("c2", np.array([1, 2, 3]), [1, 2], {})
    await store.cohorts.set_phase("c3", Phase.MASKED_INPUT)
    assert await store.cohorts.abort_running("server restarted") == 1
    rows = {c.id: (c.status, c.phase) for c in await store.cohorts.of_round(rid)}
    assert rows == {"c1": ("aborted", Phase.SHARE_KEYS), "c2": ("finished", Phase.DONE),
                    "c3": ("aborted", Phase.MASKED_INPUT)}
    phases = [(e.cohort_id, e.data["phase"]) for e in await store.events.of_query(qid) if e.type == "cohort.phase"]
    assert phases == [("c1", "share_keys"), ("c3", "share_keys"), ("c3", "masked_input")]
    aborted = {e.cohort_id: e.data for e in await store.events.of_query(qid) if e.type == "cohort.aborted"}
    assert aborted == {"c1": {"reason": "too few", "phase": "share_keys"},
                       "c3": {"reason": "server restarted", "phase": "masked_input"}}
    await store.engine.dispose()


async def test_finished_sums_accumulate_atomically(migrated_url: str) -> None:
    store, qid, rid, devs = await _setup(migrated_url, 4)
    await cohorts_service.create_cohort(store, "c1", qid, rid, {}, "secagg", {devs[0]: 1, devs[1]: 2})
    await store.cohorts.finish("c1", np.array([1, -2, 3]), [1, 2], {})
    await cohorts_service.create_cohort(store, "c2", qid, rid, {}, "secagg", {devs[2]: 1, devs[3]: 2})
    await store.cohorts.finish("c2", np.array([10, 20, 30]), [2], {"masked_input": [1]})
    with pytest.raises(QueryNotLive, match="is finished"):
        await store.cohorts.finish("c2", np.array([1, 1, 1]), [1], {})
    r = await store.rounds.by_id(rid)
    assert r is not None and r.contributors == 3
    assert vec_from_bytes(r.aggregate).tolist() == [11, 18, 33]
    assert await store.rounds.contributors(qid) == {0: sorted([devs[0], devs[1], devs[3]])}
    await store.engine.dispose()


async def _drive(
    migrated_url: str, n: int, drop_before: dict[int, Phase], min_survivors: int,
    sent: dict[int, tuple[int, bytes]] | None = None, phase_timeout_s: float = 0.7, metrics: Metrics | None = None,
    clock: Clock | None = None,
) -> tuple[CohortRuntime, dict[int, np.ndarray], Store]:
    dim, bits = 4, 16
    store, qid, rid, devs = await _setup(migrated_url, n, dim)
    cfg = SecAggConfig(session_id=b"s" * 16, n=n, dim=dim, bits=bits, min_survivors=min_survivors)
    members = {d: i + 1 for i, d in enumerate(devs)}
    await cohorts_service.create_cohort(store, "c", qid, rid, cfg.to_dict(), "secagg", members)
    ended: list[CohortRuntime] = []
    cohort = CohortRuntime("c", qid, rid, ServerSession(cfg), bits, members, phase_timeout_s, store, metrics or Metrics(),
                           ThreadPoolExecutor(2), ended.append, clock=clock)
    rng = np.random.default_rng(0)
    inputs = {p: rng.integers(-5, 6, size=dim) for p in members.values()}
    runner = asyncio.create_task(cohort.run())

    async def device(d: str, p: int) -> None:
        client = ClientSession(cfg, p, encoding.to_modular(inputs[p], bits))
        msg, phase = client.start(), 0
        while True:
            if drop_before.get(p) is not None and phase >= drop_before[p]:
                return
            await cohort.submit(d, phase, msg)
            if sent is not None:
                sent[p] = (phase, msg)
            nxt = await cohort.next_message(d, phase, 10)
            if nxt.kind != "message":
                return
            msg, phase = client.receive(nxt.body), nxt.phase

    await asyncio.gather(*(device(d, p) for d, p in members.items()), return_exceptions=True)
    await runner
    assert ended == [cohort]
    return cohort, inputs, store


async def test_cohort_runtime_exact_with_drops(migrated_url: str) -> None:
    drops = {1: Phase.SHARE_KEYS, 2: Phase.MASKED_INPUT, 3: Phase.UNMASKING}
    cohort, inputs, store = await _drive(migrated_url, 8, drops, 4)
    assert cohort.status == "finished"
    expected_parties = set(inputs) - {1, 2}  # 3 sent its masked input before dropping
    assert cohort.contributors == expected_parties
    (row,) = await store.cohorts.of_round(cohort.round_id)
    assert vec_from_bytes(row.sum).tolist() == sum(inputs[p] for p in expected_parties).tolist()
    assert row.phase == Phase.DONE
    opened = [e.data["phase"] for e in await store.events.of_query(cohort.query_id) if e.type == "cohort.phase"]
    assert opened == ["share_keys", "masked_input", "unmasking"]  # semi-honest: no consistency check
    await store.engine.dispose()


async def test_cohort_stamps_read_the_injected_clock(migrated_url: str) -> None:
    clock = ManualClock(start=5_000.0)
    cohort, _, store = await _drive(migrated_url, 4, {}, 3, clock=clock)
    assert cohort.status == "finished"
    assert cohort.started == 5_000.0 and cohort.ended == 5_000.0  # the manual clock never moved
    await store.engine.dispose()


def test_cohort_spec_is_frozen_and_read_by_the_runtime() -> None:
    import dataclasses

    spec = CohortSpec(task_digest=b"d" * 32, kind_dim=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.kind_dim = 4  # type: ignore[misc]
    cfg = SecAggConfig(session_id=b"s" * 16, n=3, dim=4, bits=16, min_survivors=2)
    cohort = CohortRuntime("c", "q", 1, ServerSession(cfg), 16, {"a": 1, "b": 2, "c": 3}, 1.0, None,  # type: ignore[arg-type]
                           Metrics(), ThreadPoolExecutor(1), lambda _: None, spec=spec)
    assert (cohort.spec, cohort.task_digest, cohort.kind_dim, cohort.validation) == (spec, b"d" * 32, 3, None)


async def test_cohort_runtime_aborts_with_reason(migrated_url: str) -> None:
    drops = {p: Phase.MASKED_INPUT for p in range(1, 5)}
    cohort, _, store = await _drive(migrated_url, 6, drops, 4)
    assert cohort.status == "aborted" and "needed at least 4" in (cohort.reason or "")
    assert await store.rounds.members(cohort.round_id) == set()
    (row,) = await store.cohorts.of_round(cohort.round_id)
    assert (row.status, row.phase) == ("aborted", Phase.MASKED_INPUT)  # the phase that could not complete
    with pytest.raises(Gone):
        await cohort.next_message("dev005", 2, 0)
    await store.engine.dispose()


async def test_identical_retry_after_the_phase_closed_is_harmless(migrated_url: str) -> None:
    sent: dict[int, tuple[int, bytes]] = {}
    cohort, _, store = await _drive(migrated_url, 5, {}, 3, sent)
    assert cohort.status == "finished"
    phase, msg = sent[1]
    assert phase == int(Phase.UNMASKING)
    await cohort.submit("dev000", phase, msg)  # the device lost the 202 and retries: accepted again
    with pytest.raises((Conflict, Gone)):
        await cohort.submit("dev000", phase, msg + b"x")  # a different message is not
    await store.engine.dispose()


async def test_phase_closes_early_once_arrivals_stall(migrated_url: str) -> None:
    """Three of ten parties are gone before sharing keys: the phase closes once the others' answers stalled,
    long before its 30 s deadline, and the sum over the survivors is exact."""
    drops = {p: Phase.SHARE_KEYS for p in (2, 5, 9)}
    metrics = Metrics()
    started = time.monotonic()
    cohort, inputs, store = await _drive(migrated_url, 10, drops, 5, phase_timeout_s=30.0, metrics=metrics)
    assert cohort.status == "finished" and metrics.early_closes == 1  # share_keys only: the rest had everyone
    assert time.monotonic() - started < 30.0
    survivors = set(inputs) - set(drops)
    assert cohort.contributors == survivors
    (row,) = await store.cohorts.of_round(cohort.round_id)
    assert vec_from_bytes(row.sum).tolist() == sum(inputs[p] for p in survivors).tolist()
    await store.engine.dispose()


async def test_phase_never_closes_early_below_the_survivor_threshold(migrated_url: str) -> None:
    drops = {p: Phase.SHARE_KEYS for p in range(1, 7)}  # 4 answer, 5 needed: wait for the deadline, then abort
    metrics = Metrics()
    cohort, _, store = await _drive(migrated_url, 10, drops, 5, phase_timeout_s=2.0, metrics=metrics)
    assert cohort.status == "aborted" and metrics.early_closes == 0
    await store.engine.dispose()


def _arrivals(opened: float, gaps: list[float]) -> Arrivals:
    arrivals, t = Arrivals(), opened
    for gap in gaps:
        t += gap
        arrivals.add(t)
    return arrivals


@settings(max_examples=300, deadline=None)
@given(
    opened=st.floats(0, 1e6), gaps=st.lists(st.floats(0, 100), min_size=0, max_size=6),
    received=st.integers(0, 1000), quorum=st.integers(1, 1000), wait=st.floats(0, 1000),
)
def test_stalled_never_closes_below_quorum_or_inside_the_grace(
    opened: float, gaps: list[float], received: int, quorum: int, wait: float
) -> None:
    arrivals = _arrivals(opened, gaps)
    now = (arrivals.last if arrivals.last is not None else opened) + wait
    closes = stalled(now, opened, arrivals, received, quorum)
    if received < quorum or arrivals.last is None:
        assert not closes
    if closes:
        assert arrivals.first is not None and arrivals.last is not None
        last, first = arrivals.last, arrivals.first
        assert now - last >= GRACE_MIN_S  # never inside the minimum grace
        assert now - last >= min(GRACE_FACTOR * (last - opened), GRACE_GAPS * (last - first) / max(1, received - 1))
        # nor inside a pause no longer than one the phase already recovered from (unless half the phase's time)
        assert now - last >= min(GRACE_FACTOR * (last - opened), GAP_MARGIN * arrivals.longest_gap)


def test_grace_follows_the_arrival_rate() -> None:
    """A burst of 900 answers within 2 s stalls after the minimum grace; 10 answers over 8 s wait longer, but
    never more than half the time the phase has taken."""
    assert grace(0.0, _arrivals(0.0, [0.1] + [1.9 / 899] * 899), 900) == GRACE_MIN_S
    assert grace(0.0, _arrivals(0.0, [0.0] + [8.0 / 9] * 9), 10) == pytest.approx(GRACE_FACTOR * 8.0)
    between = _arrivals(0.0, [0.0] + [8.0 / 99] * 99)
    assert grace(0.0, between, 100) == pytest.approx(GRACE_GAPS * 8.0 / 99)


def test_grace_outlasts_a_pause_the_phase_already_recovered_from() -> None:
    """Answers in bursts — from 2 s on, 400 within 0.5 s, a 1.2 s pause (a group of slower devices), then 500 within
    0.3 s — are not taken for a stall at the next pause of that length, as the mean gap alone would."""
    bursts = _arrivals(0.0, [2.0] + [0.5 / 399] * 399 + [1.2] + [0.3 / 499] * 499)
    assert bursts.last is not None and bursts.first is not None and bursts.longest_gap == pytest.approx(1.2)
    assert GRACE_GAPS * (bursts.last - bursts.first) / 899 < GRACE_MIN_S  # the mean gap alone: the 0.5 s minimum
    assert grace(0.0, bursts, 900) == pytest.approx(GAP_MARGIN * 1.2)
    assert not stalled(bursts.last + 1.5, 0.0, bursts, 900, 800)
    assert stalled(bursts.last + 1.81, 0.0, bursts, 900, 800)


async def test_unmasking_closes_early_once_every_secret_is_reconstructible(migrated_url: str) -> None:
    """Two survivors never send their unmask shares: the phase closes once the others' shares suffice (not at
    its 30 s deadline), and the sum still covers both (they sent their masked input)."""
    drops = {3: Phase.UNMASKING, 7: Phase.UNMASKING}
    metrics = Metrics()
    started = time.monotonic()
    cohort, inputs, store = await _drive(migrated_url, 10, drops, 5, phase_timeout_s=30.0, metrics=metrics)
    assert cohort.status == "finished" and metrics.early_closes == 1
    assert time.monotonic() - started < 30.0
    assert cohort.contributors == set(inputs)
    (row,) = await store.cohorts.of_round(cohort.round_id)
    assert vec_from_bytes(row.sum).tolist() == sum(inputs.values()).tolist()
    await store.engine.dispose()


async def test_a_late_answer_is_dropped_cleanly(migrated_url: str) -> None:
    """Party 4 sends its masked input only after the phase closed early without it: the answer gets 410
    (dropped, as documented), the sum covers exactly the others, each once, and the stored round agrees."""
    dim, bits, n = 4, 16, 8
    store, qid, rid, devs = await _setup(migrated_url, n, dim)
    cfg = SecAggConfig(session_id=b"L" * 16, n=n, dim=dim, bits=bits, min_survivors=5)
    members = {d: i + 1 for i, d in enumerate(devs)}
    await cohorts_service.create_cohort(store, "c", qid, rid, cfg.to_dict(), "secagg", members)
    cohort = CohortRuntime("c", qid, rid, ServerSession(cfg), bits, members, 30.0, store, Metrics(),
                           ThreadPoolExecutor(2), lambda c: None)
    inputs = {p: np.arange(dim) + p for p in members.values()}
    runner = asyncio.create_task(cohort.run())
    late: list[str] = []

    async def device(d: str, p: int) -> None:
        client = ClientSession(cfg, p, encoding.to_modular(inputs[p], bits))
        msg, phase = client.start(), 0
        while True:
            if p == 4 and phase == Phase.MASKED_INPUT:
                while cohort.phase == Phase.MASKED_INPUT:  # hold the answer until the phase closed without it
                    await asyncio.sleep(0.05)
                for _ in range(2):  # the retry of a late answer gets the same answer
                    with pytest.raises(Gone) as exc:
                        await cohort.submit(d, phase, msg)
                    late.append(str(exc.value))
                return
            await cohort.submit(d, phase, msg)
            nxt = await cohort.next_message(d, phase, 10)
            if nxt.kind != "message":
                return
            msg, phase = client.receive(nxt.body), nxt.phase

    await asyncio.gather(*(device(d, p) for d, p in members.items()))
    await runner
    assert len(late) == 2 and late[0] == late[1]  # Gone, the same answer both times
    assert cohort.status == "finished" and cohort.contributors == set(inputs) - {4}
    (row,) = await store.cohorts.of_round(rid)
    assert vec_from_bytes(row.sum).tolist() == sum(v for p, v in inputs.items() if p != 4).tolist()
    r = await store.rounds.by_id(rid)
    assert r is not None and r.contributors == n - 1
    assert await store.rounds.contributors(qid) == {0: sorted(d for d, p in members.items() if p != 4)}
    await store.engine.dispose()


def test_active_devices_learn_their_neighbours_identity_keys_from_the_peer_keys() -> None:
    """Assignments carry no identity keys: each party's PeerKeys carries its closed neighbourhood's identities (not the
    whole cohort's, n² bytes at 10,000 devices), each checked against the members list; with only those, every client
    of a sparse active-model session finishes with the exact sum."""
    n, dim, bits = 130, 3, 16
    cfg = SecAggConfig(session_id=b"A" * 16, n=n, dim=dim, bits=bits, threat_model="active", graph="sparse", degree=40)
    assert not cfg.uses_complete_graph
    identity = {p: Ed25519PrivateKey.generate() for p in range(1, n + 1)}
    public = {p: ed25519_public_bytes(k) for p, k in identity.items()}
    inputs = {p: np.full(dim, p, dtype=np.uint64) for p in identity}
    clients = {p: ClientSession(cfg, p, inputs[p], identity[p]) for p in identity}
    server = ServerSession(cfg, public)
    outgoing = {p: c.start() for p, c in clients.items()}
    peer_keys: dict[int, PeerKeys] = {}
    while server.phase is not Phase.DONE:
        for p, msg in outgoing.items():
            server.receive(p, msg)
        delivered = server.close_phase()
        for p, m in delivered.items():
            if isinstance(msg := decode(m), PeerKeys):
                peer_keys[p] = msg
        outgoing = {p: out for p, m in delivered.items() if (out := clients[p].receive(m)) is not None}
    assert all({e.party for e in peer_keys[p].peers} == set(server.graph.closed(p)) for p in identity)
    assert all(e.identity == public[e.party] for pk in peer_keys.values() for e in pk.peers)
    assert max(len(pk.peers) for pk in peer_keys.values()) < n // 2
    assert server.result is not None and server.result.contributors == set(identity)
    assert server.result.vector.tolist() == [sum(range(1, n + 1))] * dim
