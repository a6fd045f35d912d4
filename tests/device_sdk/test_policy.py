"""`DevicePolicy` and `decide`, without a server: every refusal reason, the ledger's charging rule (a query's ε
once per "layer" of contributions to one round), the survivor floor, validation of the policy's fields, and
that a device's ledger survives restarts."""

from __future__ import annotations

import math
import os
from typing import Any

import pytest
from pydantic import ValidationError

from analytics_server import privacy
from device_sdk import ClientOptions, DeviceClient, DevicePolicy, LocalStore, PolicyError
from device_sdk.ledger import ContributionLedger, QueryHistory
from device_sdk.admission import ParsedAssignment, parse_assignment
from device_sdk.policy import DEFAULT_MAX_DELTA, Decision, Refusal, decide, screen
from queries import dp
from queries.envelope import Assignment
from queries.registry import get_kind
from queries.spec import QuerySpec
from secagg.config import SecAggConfig

HISTOGRAM = get_kind("histogram")
EMPTY = QueryHistory(None, __import__("collections").Counter(), 0)


def assignment(mechanism: str = "skellam", epsilon: float = 1.0, delta: float = 1e-6, n: int = 8, t_min: int = 5,
               rounds: int = 1, round_: int = 0, source: str = "words", k: int = 1, allowance: float = 0.5,
               **changes: Any) -> Assignment:
    """An assignment as the real server builds it for a cohort of n (calibration, the cohort's noise sized for its
    t_c, privacy block); the allowance keeps t_c = t_min for the default cohort of 8 (n − ⌈4⌉ < 5)."""
    spec = QuerySpec.model_validate({
        "kind": "histogram", "source": source, "params": {"buckets": ["a", "b", "c"], "max_contributions_per_device": k},
        "privacy": {"mechanism": mechanism} if mechanism == "none" else {"mechanism": mechanism, "epsilon": epsilon, "delta": delta},
        "cohort": {"min_clients": t_min, "max_clients": max(n, t_min), "dropout_allowance": allowance}})
    params = HISTOGRAM.parse_params(spec.params)
    plan = HISTOGRAM.plan_round(params, HISTOGRAM.initial_state(params), round_)
    cal = None if mechanism == "none" else dp.calibrate_query(mechanism, epsilon, delta, rounds, t_min)
    t_c, noise = privacy.cohort_noise(spec, cal, plan, privacy.round_noise(cal, plan, spec), n)
    wire = {
        "query_id": "q1", "round": round_, "cohort_id": os.urandom(16).hex(), "party_id": 1, "kind": "histogram",
        "source": source, "task": plan.task,
        "secagg": SecAggConfig(session_id=os.urandom(16), n=n, dim=plan.dim, bits=40, min_survivors=t_min,
                               threat_model="active").to_dict(),
        "threat_model": "active", "phase_timeout_s": 5, "noise": privacy.device_noise_block(noise),
        "privacy": privacy.assignment_privacy(spec, cal, plan, rounds, t_c),
    }
    return Assignment.model_validate({**wire, **changes})


def parsed(a: Assignment) -> ParsedAssignment:
    out = parse_assignment(a)
    assert isinstance(out, ParsedAssignment), out
    return out


def verdict(policy: DevicePolicy, a: Assignment, history: QueryHistory = EMPTY, spent: float = 0.0, count: int = 0,
            opted_out: bool = False) -> Refusal | Decision:
    """The device's verdict: the assignment parsed (an invalid one refused there), then the policy's."""
    early = screen(policy, a, opted_out)
    if early is not None:
        return early
    p = parse_assignment(a)
    return p if isinstance(p, Refusal) else decide(policy, p, history, spent, count, opted_out)


def reason(v: Refusal | Decision) -> str | None:
    return v.reason if isinstance(v, Refusal) else None


def _secagg(a: Assignment, **changes: Any) -> dict[str, Any]:
    return {**a.secagg, **changes}


@pytest.mark.parametrize(("changes", "policy", "detail"), [
    ({"threat_model": "semi_honest"}, DevicePolicy(), "threat model semi_honest"),
    ({"secagg": {"threat_model": "semi_honest"}}, DevicePolicy(), "threat model semi_honest"),
    ({"secagg": {"threshold": 5}}, DevicePolicy(), "threshold: 5 of a neighbourhood of 8"),  # the floor is 6 of 8
    ({"secagg": {"n": 300, "graph": "sparse", "degree": 2, "threshold": 2}}, DevicePolicy(), "degree: 2 neighbours"),
    ({}, DevicePolicy(corrupt_fraction=0.5), "threshold: 6 of a neighbourhood of 8"),  # a wary device's floor is 7
])
def test_a_cohort_below_the_device_s_own_floor_is_refused_before_anything_is_read(
        changes: dict[str, Any], policy: DevicePolicy, detail: str) -> None:
    """The safety floor (secagg/floor.py): no consistency round, a threshold below ⌊(m + ⌊γn⌋)/2⌋ + 1, a sparse degree
    below the connectivity floor — whatever the server set, and however consistently it set it."""
    a = assignment()
    update = {k: v for k, v in changes.items() if k != "secagg"}
    if "secagg" in changes:
        update["secagg"] = _secagg(a, **changes["secagg"])
    v = verdict(policy, a.model_copy(update=update))
    assert isinstance(v, Refusal) and v.reason == "unsafe_parameters", v
    assert detail in v.detail
    assert isinstance(verdict(DevicePolicy(), a), Decision)  # the honest assignment passes the default floor


def test_a_refusal_below_the_floor_is_kept_in_the_device_s_transparency_log(tmp_path: Any) -> None:
    store = LocalStore(tmp_path / "device.db")
    client = DeviceClient("http://127.0.0.1:9", store)
    a = assignment()
    bad = a.model_copy(update={"secagg": _secagg(a, threshold=5)})
    refusal = client._admit(bad)
    assert isinstance(refusal, Refusal) and refusal.reason == "unsafe_parameters"
    (record,) = client.transparency_log()
    assert record.status == "refused" and record.epsilon is None and record.detail.startswith("unsafe_parameters: ")
    assert record.cohort_id == bad.cohort_id


def test_the_policy_s_floor_assumptions_are_checked() -> None:
    for name, value in (("corrupt_fraction", 1.0), ("corrupt_fraction", -0.1), ("dropout_fraction", float("nan")),
                        ("corrupt_fraction", True)):
        with pytest.raises(PolicyError, match=name):
            DevicePolicy(**{name: value})
    with pytest.raises(PolicyError, match="corrupt_fraction \\+ dropout_fraction"):
        DevicePolicy(corrupt_fraction=0.6, dropout_fraction=0.5)


def test_the_default_policy_accepts_an_honest_assignment() -> None:
    d = verdict(DevicePolicy(), assignment())
    assert isinstance(d, Decision)
    assert d.epsilon_charge == 1.0 and d.delta_charge == 1e-6 and d.min_survivors == 5  # the noise's t_min
    assert d.declared_bounds is None and d.noise_floor is not None and not d.proofs
    none = verdict(DevicePolicy(), assignment("none"))
    assert isinstance(none, Decision) and none.epsilon_charge is None and none.min_survivors is None


@pytest.mark.parametrize(
    ("policy", "a", "expected"),
    [
        (DevicePolicy(allowed_sources=["clicks"]), {}, "source_not_allowed"),
        (DevicePolicy(allowed_sources={"words": ["heavy_hitters"]}), {}, "kind_not_allowed"),
        (DevicePolicy(require_noise=True), {"mechanism": "none"}, "noise_required"),
        (DevicePolicy(max_epsilon_per_query=0.5), {}, "epsilon_per_query"),
        (DevicePolicy(max_epsilon_per_query=5.0), {"mechanism": "none"}, "epsilon_per_query"),
        (DevicePolicy(max_epsilon_per_day=5.0), {"mechanism": "none"}, "epsilon_per_day"),
        (DevicePolicy(max_epsilon_per_query=5.0), {"delta": 1e-4}, "delta_per_query"),
        (DevicePolicy(max_delta_per_query=1e-7), {}, "delta_per_query"),
        (DevicePolicy(min_cohort=9), {}, "cohort_too_small"),
        (DevicePolicy(), {"round_": 1}, "privacy_unverifiable"),
    ],
)
def test_each_refusal_reason(policy: DevicePolicy, a: dict[str, Any], expected: str) -> None:
    assert reason(verdict(policy, assignment(**a))) == expected


def test_a_tiny_cohort_cannot_carry_noise_calibrated_for_more() -> None:
    honest = assignment(n=8, t_min=5)
    lying = honest.model_copy(update={"privacy": honest.privacy.model_copy(update={"t_min": 9})})
    assert reason(verdict(DevicePolicy(), lying)) == "cohort_too_small"


@pytest.mark.parametrize("mechanism", ["discrete_gaussian", "skellam"])
def test_the_floor_is_sharp(mechanism: str) -> None:
    """Just below the recomputed floor: refused; at it: accepted."""
    a = assignment(mechanism)
    floor = verdict(DevicePolicy(), a).noise_floor  # type: ignore[union-attr]
    for scale, ok in ((floor * (1 - 1e-6), False), (floor, True)):
        bent = a.model_copy(update={"noise": a.noise.model_copy(update={"scale": scale})})
        assert (reason(verdict(DevicePolicy(), bent)) is None) == ok


def test_the_floor_uses_the_kinds_own_sensitivity_not_the_declared_one() -> None:
    """The task asks for 3 votes; the server declares the sensitivity of 1 and sends 1 vote's noise."""
    one = assignment(k=1)
    three_task = {**one.task, "max_contributions": 3}
    assert reason(verdict(DevicePolicy(), one.model_copy(update={"task": three_task}))) == "noise_below_floor"
    honest_three = assignment(k=3)
    lie = honest_three.model_copy(update={"privacy": honest_three.privacy.model_copy(update={"l2_sensitivity": 1.0})})
    assert isinstance(verdict(DevicePolicy(), lie), Decision)  # declared sensitivities are not what it trusts


def test_a_kind_without_task_bounds_falls_back_to_checking_its_vector(monkeypatch: pytest.MonkeyPatch) -> None:
    a = assignment()
    monkeypatch.setattr(type(HISTOGRAM), "task_sensitivity", lambda self, task: None)
    d = verdict(DevicePolicy(), a)
    assert isinstance(d, Decision) and d.declared_bounds == (1.0, 1.0)


def test_require_proofs_applies_to_kinds_that_support_them(monkeypatch: pytest.MonkeyPatch) -> None:
    strict = DevicePolicy(require_proofs=True)
    monkeypatch.setattr(type(HISTOGRAM), "supports_proofs", False)
    assert isinstance(verdict(strict, assignment()), Decision)  # a kind without proofs: nothing to require
    monkeypatch.undo()
    assert type(HISTOGRAM).supports_proofs  # histograms prove their contributions (docs/validation.md)
    assert reason(verdict(strict, assignment())) == "proofs_required"
    with_proofs = assignment()
    with_proofs = with_proofs.model_copy(update={"privacy": with_proofs.privacy.model_copy(update={"validation": "proofs"})})
    d = verdict(strict, with_proofs)
    assert isinstance(d, Decision) and d.proofs


def test_charging_once_per_query_and_again_for_a_second_seat_in_one_round() -> None:
    from collections import Counter

    a = assignment(rounds=3)
    public = a.privacy.model_dump(exclude={"l1_sensitivity", "l2_sensitivity"})
    first = verdict(DevicePolicy(), a)
    assert first.epsilon_charge == 1.0  # type: ignore[union-attr]
    later_round = verdict(DevicePolicy(), assignment(rounds=3, round_=1), QueryHistory(public, Counter({0: 1}), 1))
    assert later_round.epsilon_charge == 0.0  # type: ignore[union-attr]
    again = verdict(DevicePolicy(), a, QueryHistory(public, Counter({0: 1}), 1))
    assert again.epsilon_charge == 1.0  # type: ignore[union-attr]
    capped = verdict(DevicePolicy(max_epsilon_per_day=1.5), a, QueryHistory(public, Counter({0: 1}), 1), spent=1.0)
    assert reason(capped) == "epsilon_per_day"
    changed = verdict(DevicePolicy(), assignment(rounds=3, epsilon=2.0), QueryHistory(public, Counter({0: 1}), 1))
    assert reason(changed) == "privacy_unverifiable"
    # each cohort sizes its shares for itself: a later round's cohort of another size has another t_min (t_c), which is
    # no change of the query's parameters; the device holds that cohort to its own t_c and floor
    larger = verdict(DevicePolicy(), assignment(rounds=3, round_=1, n=40), QueryHistory(public, Counter({0: 1}), 1))
    assert isinstance(larger, Decision) and larger.epsilon_charge == 0.0 and larger.min_survivors == 20  # 40 − ⌈0.5·40⌉
    assert larger.noise_floor is not None and larger.noise_floor < first.noise_floor / 3  # type: ignore[union-attr]


def test_participation_cap_and_min_survivors() -> None:
    assert reason(verdict(DevicePolicy(max_contributions_per_day=2), assignment(), count=2)) == "participation_cap"
    assert verdict(DevicePolicy(min_cohort=3), assignment()).min_survivors == 5  # type: ignore[union-attr]
    assert verdict(DevicePolicy(min_cohort=3, min_survivors=7), assignment()).min_survivors == 7  # type: ignore[union-attr]
    assert verdict(DevicePolicy(min_cohort=6), assignment("none")).min_survivors == 6  # type: ignore[union-attr]
    assert reason(verdict(DevicePolicy(), assignment(), opted_out=True)) == "opted_out"


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_epsilon_per_query", 0), ("max_epsilon_per_day", -1.0), ("max_epsilon_per_day", math.inf),
     ("min_cohort", 0), ("min_cohort", 2.5), ("min_survivors", True), ("require_noise", "yes"),
     ("max_delta_per_query", 1.0), ("max_contributions_per_day", 0), ("allowed_sources", "words"),
     ("allowed_sources", {"words": "histogram"}), ("allowed_sources", [""])],
)
def test_bad_policy_fields_name_the_field(field: str, value: Any) -> None:
    with pytest.raises(PolicyError, match=field.split("_per")[0] if field.startswith("max_eps") else field):
        DevicePolicy(**{field: value})


def test_the_fixed_names_and_defaults() -> None:
    p = DevicePolicy()
    assert (p.allowed_sources, p.require_noise, p.max_epsilon_per_query, p.max_epsilon_per_day, p.min_cohort) == (
        None, False, None, None, None)
    assert p.delta_cap is None and DevicePolicy(max_epsilon_per_day=1).delta_cap == DEFAULT_MAX_DELTA
    with pytest.raises(TypeError, match="policy"):
        DeviceClient("http://127.0.0.1:9", LocalStore(),
                     ClientOptions(policy={"require_noise": True}))  # type: ignore[arg-type]


def test_the_ledger_survives_a_restart(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = LocalStore(tmp_path / "d.db")
    ledger = ContributionLedger(store)
    row = ledger.reserve(query_id="q", round=0, cohort_id="c", kind="histogram", source="words", mechanism="skellam",
                         epsilon=1.0, delta=1e-6, query_privacy={"epsilon": 1.0}, encoding_scale=1, proofs=False,
                         cohort_size=8)
    ledger.mark_sent(row)
    ledger.finish(row, "finished", True)
    unsent = ledger.reserve(query_id="q2", round=0, cohort_id="c2", kind="histogram", source="words",
                            mechanism="skellam", epsilon=1.0, delta=1e-6, query_privacy={}, encoding_scale=1,
                            proofs=False, cohort_size=8)
    ledger.release(unsent)  # nothing was sent: no charge, no log entry
    again = ContributionLedger(LocalStore(tmp_path / "d.db"))
    (record,) = again.records()
    assert record.query_id == "q" and record.status == "finished" and record.contributed and record.epsilon == 1.0
    assert again.spent_since(0) == (1.0, 1e-6, 1) and again.history("q").layers_charged == 1


def test_a_vector_above_the_declared_bounds_is_not_sent(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """For a kind that cannot bound its vector from the task, the device holds the vector to the declared
    sensitivities; the reservation is released when nothing is sent."""
    import numpy as np

    from device_sdk.contribution import Contribution

    a = assignment()
    monkeypatch.setattr(type(HISTOGRAM), "task_sensitivity", lambda self, task: None)
    d = verdict(DevicePolicy(), a)
    ledger = ContributionLedger(LocalStore(tmp_path / "d.db"))
    row = ledger.reserve(query_id="q1", round=0, cohort_id=a.cohort_id, kind="histogram", source="words",
                         mechanism="skellam", epsilon=1.0, delta=1e-6, query_privacy={}, encoding_scale=1, proofs=False,
                         cohort_size=8)
    c = Contribution(parsed(a), d, ledger, row)  # type: ignore[arg-type]
    assert c.check_vector(np.array([0, 1, 0])) is None
    refusal = c.check_vector(np.array([1, 1, 0]))
    assert refusal is not None and refusal.reason == "contribution_exceeds_bound"
    assert c.end(False, None) is None and ledger.records() == []


def test_weighted_rounds_check_their_own_floor_and_the_devices_sum_of_weights() -> None:
    """A kind may split the budget unevenly (feature_stats: 0.3 / 1.62 / 1.08 unit rounds of 3): a round of weight w
    may carry the unit round's noise / √w; the weights of the rounds one device contributes to may not exceed the
    query's rounds; the weight differing between rounds is not a change of the query's privacy parameters."""
    from collections import Counter

    def weighted(w: float, round_: int = 0, scale: float = 1.0) -> Assignment:
        a = assignment(rounds=3, round_=round_)
        cal = dp.calibrate_query("skellam", 1.0, 1e-6, 3, 5)
        noise = dp.round_noise(cal, a.privacy.l1_sensitivity, a.privacy.l2_sensitivity, weight=w)
        return a.model_copy(update={"privacy": a.privacy.model_copy(update={"weight": w}),
                                    "noise": a.noise.model_copy(update={"scale": noise.per_device_scale * scale})})

    heavy = weighted(1.62, round_=1)
    assert isinstance(verdict(DevicePolicy(), heavy), Decision)  # below a unit round's floor, fine for its weight
    unit = assignment(rounds=3, round_=1)
    unit = unit.model_copy(update={"noise": unit.noise.model_copy(update={"scale": heavy.noise.scale})})
    assert reason(verdict(DevicePolicy(), unit)) == "noise_below_floor"  # the same noise claimed as a unit round
    assert reason(verdict(DevicePolicy(), weighted(1.62, round_=1, scale=0.7))) == "noise_below_floor"
    public = weighted(0.3).privacy.model_dump(exclude={"l1_sensitivity", "l2_sensitivity"})
    seen = QueryHistory(public, Counter({0: 1, 1: 1}), 1, {0: 0.3, 1: 1.62})
    assert isinstance(verdict(DevicePolicy(), weighted(1.08, round_=2), seen), Decision)
    over = QueryHistory(public, Counter({0: 1, 1: 1}), 1, {0: 1.0, 1: 1.62})
    assert reason(verdict(DevicePolicy(), weighted(1.08, round_=2), over)) == "privacy_unverifiable"


def test_no_assignment_can_ask_a_device_to_run_unmasked() -> None:
    """The benchmark's unmasked session is a hook the device is built with (`DeviceHooks.session_factory`), not a field
    a server can send: an assignment naming a session mode is not an assignment."""
    with pytest.raises(ValidationError, match="mode"):
        assignment(mode="plain")
