"""`fa audit`'s walk keeps each source's spend as a running sum; its findings are those of re-adding every earlier
charge at each new one (the audit before it was made linear), on random logs of charges, refunds, further runs
and budget changes over a few sources."""

from __future__ import annotations

import random
from typing import Any

import pytest

from analyst_client.audit import _Walker
from queries.dp.errors import BudgetExceeded
from queries.dp.ledger import Budget, compose_costs
from translog import entries as te

SOURCES = ("a", "b", "c")


def random_log(seed: int, n: int = 400) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    entries: list[dict[str, Any]] = [te.budget_entry(te.DEFAULT_SOURCE, 5.0, 1e-5, 0)]
    live: dict[str, tuple[str, float, float, int]] = {}  # query id → (source, ε, δ, runs)
    tasks: list[str] = []
    for k in range(n):
        roll = rng.random()
        if roll < 0.45 or not live:
            qid, source = f"q{k}", rng.choice(SOURCES)
            eps, delta = rng.choice([0.1, 0.25, 0.3, 1.0, 1.7]), rng.choice([0.0, 1e-7, 3e-7])
            entries += [te.query_entry(qid, source, "histogram", {"k": k}, k),
                        te.charge_entry(qid, source, eps, delta, k)]
            live[qid] = (source, eps, delta, 1)
        elif roll < 0.7:
            qid = rng.choice(sorted(live))
            source, eps, delta, runs = live.pop(qid)
            entries.append(te.charge_entry(qid, source, eps * runs, delta * runs, k, refund=True))
        elif roll < 0.85:
            qid = rng.choice(sorted(live))
            source, eps, delta, runs = live[qid]
            cohort = f"{k:032d}"
            tasks.append(cohort)
            entries.append(te.task_entry(qid, 0, cohort, bytes(32), k, {"n": 60, "degree": 59, "threshold": 41,
                                                                        "threat_model": "active",
                                                                        "graph_seed": "members_root/v1"}))
            entries.append(te.charge_entry(qid, source, eps, delta, k, layer=runs + 1, cohort_id=cohort))
            live[qid] = (source, eps, delta, runs + 1)
        else:
            entries.append(te.budget_entry(rng.choice(SOURCES + (te.DEFAULT_SOURCE,)), rng.choice([2.0, 4.0, 8.0]),
                                           1e-5, k))
    return entries


def reference_over_budget(entries: list[dict[str, Any]]) -> list[int]:
    """The charges over budget, found by summing every live charge of the source again at each charge."""
    budgets: dict[str, tuple[float, float]] = {}
    rows: dict[str, dict[str, list[float]]] = {}  # source → query id → [ε, δ]
    over = []
    for i, e in enumerate(entries):
        if e["type"] == "budget":
            budgets[e["source"]] = (e["total_epsilon"], e["total_delta"])
        elif e["type"] == "charge":
            source = e["source"]
            total = budgets.get(source) or budgets[te.DEFAULT_SOURCE]
            spent = compose_costs((r[0], r[1]) for r in rows.get(source, {}).values())
            try:
                Budget(*total).check(spent, (e["epsilon"], e["delta"]))
            except BudgetExceeded:
                over.append(i)
            row = rows.setdefault(source, {}).setdefault(e["query_id"], [0.0, 0.0])
            row[0] += e["epsilon"]
            row[1] += e["delta"]
        elif e["type"] == "refund":
            rows[e["source"]].pop(e["query_id"])
    return over


@pytest.mark.parametrize("seed", range(25))
def test_the_running_spend_finds_what_re_adding_every_charge_finds(seed: int) -> None:
    entries = random_log(seed)
    walker = _Walker()
    for i, e in enumerate(entries):
        walker.feed(i, e)
    expected = reference_over_budget(entries)
    assert [(f.code, f.index) for f in walker.findings] == [("over_budget", i) for i in expected]
    assert sorted(walker.over) == expected
    assert expected, "each random log goes over budget somewhere"
    for source, history in walker.done().spends.items():  # the spend after every charge and refund, as re-added
        for i, eps, delta in history:
            live = reference_spend(entries[: i + 1], source)
            assert eps == pytest.approx(live[0], rel=1e-12, abs=1e-15)
            assert delta == pytest.approx(live[1], rel=1e-12, abs=1e-21)


def reference_spend(entries: list[dict[str, Any]], source: str) -> tuple[float, float]:
    rows: dict[str, list[float]] = {}
    for e in entries:
        if e.get("source") != source:
            continue
        if e["type"] == "charge":
            row = rows.setdefault(e["query_id"], [0.0, 0.0])
            row[0] += e["epsilon"]
            row[1] += e["delta"]
        elif e["type"] == "refund":
            rows.pop(e["query_id"], None)
    spent = compose_costs((r[0], r[1]) for r in rows.values())
    return spent.epsilon, spent.delta
