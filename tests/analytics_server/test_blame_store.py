"""`blame_service.abort_failed_opening` (analytics_server/services/blame_service.py): who is freed after a refused sum, what one
more run costs the query's source (charged in the same transaction, logged), and who is named."""

from __future__ import annotations

import pytest

from analytics_server.services import blame_service, cohorts_service, queries_service
from analytics_server.services.blame_service import FailedOpening
from analytics_server.db.engine import make_engine
from analytics_server.db.store import Store
from queries import dp

BUDGET = dp.Budget(3.0, 1e-5)


async def _setup(url: str, budget: dp.Budget = BUDGET) -> tuple[Store, str, int, list[str]]:
    store = Store(make_engine(url))
    await store.log.setup(bytes(32), "test")
    q = await queries_service.submit(store, "histogram", None, "words", {}, {}, 1, None, None,
                                 cost=dp.PrivacyCost(1.0, 1e-7), default_budget=budget)
    r = await store.rounds.create(q.id, 0, {}, None, 20, need=2, dim=3)
    devices = [f"dev{i:03d}" for i in range(8)]
    for d in devices:
        await store.devices.register(d, d.encode().ljust(32, b"\0"))
    return store, q.id, r.id, devices


def _failure(contributors: list[str], reuse: bool = True, extra_runs: int = 1, budget: dp.Budget = BUDGET) -> FailedOpening:
    return FailedOpening(round_index=0, contributors=frozenset(contributors), reuse=reuse, extra_runs=extra_runs,
                         quorum=2, default_budget=budget)


async def _runs(store: Store, qid: str) -> tuple[int, float]:
    (row,) = [r for r in await store.reports.budget_charges("words", None) if r.query_id == qid]
    return row.runs, row.epsilon


async def test_a_noisy_cohorts_members_are_freed_for_one_more_charged_and_logged_run(migrated_url: str) -> None:
    store, qid, rid, d = await _setup(migrated_url)
    await cohorts_service.create_cohort(store, "c1", qid, rid, {}, "secagg", {d[0]: 1, d[1]: 2, d[2]: 3, d[3]: 4})
    out = await blame_service.abort_failed_opening(store, "c1", "detected cheating", _failure(d[:3]))  # d[3] dropped out before
    assert (out.freed, out.kept, out.runs, out.named) == (3, 0, 2, {})
    assert await store.rounds.members(rid) == set()  # every seat freed, d[3]'s at no cost
    assert await _runs(store, qid) == (2, pytest.approx(2.0))
    size, entries = await store.log.entries(0, 1000)
    runs = [e for _, e in entries if e["type"] == "charge" and e.get("layer") == 2]
    assert runs == [{**runs[0], "query_id": qid, "source": "words", "epsilon": 1.0, "delta": 1e-7, "cohort_id": "c1"}]

    # the same three fail again with a fresh device: those in two refused sums of the round stay seated (one extra
    # run allowed), the fresh one is freed under the run already charged; d0 — in both, sharing d1, d2 too — is
    # not named
    await cohorts_service.create_cohort(store, "c2", qid, rid, {}, "secagg", {d[0]: 1, d[1]: 2, d[2]: 3, d[4]: 4})
    out = await blame_service.abort_failed_opening(store, "c2", "detected cheating", _failure([d[0], d[1], d[2], d[4]]))
    assert (out.freed, out.kept, out.runs, out.named) == (1, 3, 2, {})
    assert await store.rounds.members(rid) == {d[0], d[1], d[2]}
    assert await _runs(store, qid) == (2, pytest.approx(2.0))

    # d4 fails a third cohort that shares only it with the second: named
    await cohorts_service.create_cohort(store, "c3", qid, rid, {}, "secagg", {d[4]: 1, d[5]: 2, d[6]: 3})
    out = await blame_service.abort_failed_opening(store, "c3", "detected cheating", _failure([d[4], d[5], d[6]]))
    assert out.named == {d[4]: ["c2", "c3"]}
    assert "failed openings" in (await store.queries.excluded_devices(qid))[d[4]]
    assert await store.blame.failed_summary(qid) == (3, 2)
    assert set(await store.blame.failed_groups(qid)) == {"c1", "c2", "c3"}
    await store.engine.dispose()


async def test_in_a_noise_free_round_or_without_budget_the_members_keep_their_seats(migrated_url: str) -> None:
    store, qid, rid, d = await _setup(migrated_url)
    await cohorts_service.create_cohort(store, "c1", qid, rid, {}, "secagg", {d[0]: 1, d[1]: 2, d[2]: 3})
    out = await blame_service.abort_failed_opening(store, "c1", "detected cheating", _failure(d[:3], reuse=False))
    assert (out.freed, out.kept, out.runs) == (0, 3, 1) and "noise-free" in (out.why_kept or "")
    assert await store.rounds.members(rid) == set(d[:3])
    assert await _runs(store, qid) == (1, pytest.approx(1.0))

    tight = dp.Budget(1.5, 1e-5)  # the query's 1.0 is spent; another run does not fit
    await cohorts_service.create_cohort(store, "c2", qid, rid, {}, "secagg", {d[3]: 1, d[4]: 2, d[5]: 3})
    out = await blame_service.abort_failed_opening(store, "c2", "detected cheating", _failure(d[3:6], budget=tight))
    assert (out.freed, out.kept, out.runs) == (0, 3, 1) and "budget" in (out.why_kept or "")
    assert await store.rounds.members(rid) == set(d[:6])

    await cohorts_service.create_cohort(store, "c3", qid, rid, {}, "secagg", {d[6]: 1, d[7]: 2})
    out = await blame_service.abort_failed_opening(store, "c3", "detected cheating", _failure(d[6:8], extra_runs=0))
    assert (out.freed, out.kept) == (0, 2)
    assert await _runs(store, qid) == (1, pytest.approx(1.0))
    await store.engine.dispose()
