"""Cohort planning as a pure function (`analytics_server.cohort_plan.plan_cohort`): t_c and the devices' noise, the
validity statement, the secagg parameters at or above the devices' floor, the protocol and its session, the
assignments and their one task digest — and the properties that hold for every cohort size and dropout allowance."""

from __future__ import annotations

import dataclasses
import math
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics_server import privacy, validation
from analytics_server.cohort import CohortRuntime
from analytics_server.cohort_plan import QueryContext, RoundContext, ServerTerms, plan_cohort
from analytics_server.metrics import Metrics
from analytics_server.noise_plan import round_need
from analytics_server.protocols import SECURE_AGGREGATION, UNMASKED, for_benchmark
from queries import dp
from queries.registry import get_kind
from queries.spec import MAX_DROPOUT_ALLOWANCE, QuerySpec
from queries.task_digest import task_digest
from secagg import floor
from secagg.phases import Phase
from secagg.plain import PlainServerSession
from secagg.server import ServerSession
from secagg.validity import LIMBS

KIND = get_kind("histogram")
TERMS = ServerTerms(server_url="https://fa.example", failed_opening_extra_runs=1, blame_quorum=2,
                    default_budget=dp.Budget(10.0, 1e-5))
SESSION = bytes(range(16))


def _query(mechanism: str = "skellam", validation_mode: str = "proofs", t_min: int = 20, max_clients: int = 400,
           dropout: float = 0.15) -> QueryContext:
    privacy_block = {"mechanism": "none"} if mechanism == "none" else {"mechanism": mechanism, "epsilon": 1.0,
                                                                       "delta": 1e-6}
    raw = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun", "star"]},
           "privacy": {**privacy_block, "validation": validation_mode},
           "cohort": {"min_clients": t_min, "max_clients": max_clients, "dropout_allowance": dropout}}
    spec = QuerySpec.model_validate(raw)
    params = KIND.parse_params(spec.params)
    calibration = privacy.check_and_calibrate(spec, KIND, params, "demo")
    return QueryContext("q1", spec, raw, KIND, calibration, KIND.rounds_upper_bound(params))


def _round(query: QueryContext) -> RoundContext:
    """Round 0 as the orchestrator stores it (`_new_round`), read back through its JSON column."""
    params = KIND.parse_params(query.spec.params)
    plan = KIND.plan_round(params, KIND.initial_state(params), 0)
    assert plan is not None
    noise = privacy.round_noise(query.calibration, plan, query.spec)
    stored = None if noise is None else noise.to_dict()
    bits = privacy.choose_bits(query.spec.cohort.max_clients, plan, noise)
    statement = validation.round_statement(query.spec, KIND, plan, noise, query.calibration)
    bits = validation.round_bits(bits, query.spec.cohort.max_clients, statement)
    return RoundContext(7, 0, plan, privacy.stored_noise(stored), bits, round_need(query.spec, plan, query.calibration))


def _members(n: int) -> dict[str, int]:
    return {f"device-{i:04d}": i + 1 for i in range(n)}


def test_a_noisy_proved_cohort_is_planned_for_its_own_t_c() -> None:
    query = _query()
    rnd = _round(query)
    n = 200
    plan = plan_cohort(query, rnd, _members(n), SESSION, SECURE_AGGREGATION, TERMS)
    t_c = dp.cohort_threshold(20, n, 0.15)
    assert plan.t_c == t_c == 200 - math.ceil(0.15 * 200) and plan.need == max(rnd.need, t_c)
    assert rnd.noise is not None and plan.noise is not None
    assert plan.noise == dp.cohort_noise(query.calibration, rnd.plan, rnd.noise, t_c)  # type: ignore[arg-type]
    assert plan.noise.noise.t_min == t_c and plan.noise.scale == rnd.noise.scale  # same encoding scale as the round
    # the statement: with proofs the masked vector carries the blinding limbs after the kind's entries
    assert plan.statement is not None and plan.statement.encoding_scale == rnd.noise.scale
    assert plan.config.dim == rnd.plan.dim + LIMBS and plan.kind_dim == rnd.plan.dim
    # secagg parameters: the floor the devices compute, the active model, t_c survivors
    safe = floor.plan(n, 0.15)
    cfg = plan.config
    assert (cfg.share_threshold, cfg.resolved_degree) == (safe.threshold, safe.degree)
    assert cfg.threat_model == "active" and cfg.survivor_threshold == plan.need and cfg.bits == rnd.bits
    assert cfg.session_id == SESSION and plan.cohort_id == SESSION.hex()
    # assignments: one per member, one task digest, the cohort's noise and privacy blocks
    assert {d: a.party_id for d, a in plan.assignments.items()} == _members(n)
    assert {task_digest(a) for a in plan.assignments.values()} == {plan.task_digest}
    a = plan.assignments["device-0000"]
    assert a.first_phase == Phase.ADVERTISE_KEYS and a.secagg == cfg.to_dict() and a.server_url == TERMS.server_url
    assert a.noise is not None and a.noise.scale == plan.noise.noise.per_device_scale
    assert a.noise.encoding_scale == plan.noise.scale
    assert a.privacy is not None and a.privacy.t_min == t_c
    assert a.validation is not None and a.validation.noise_bound == plan.statement.noise_bound
    assert a.spec == query.spec_json and a.query_id == "q1" and a.round == 0
    # what a refused sum or a shortfall means
    assert plan.failed_opening.reuse and plan.failed_opening.extra_runs == 1 and plan.failed_opening.quorum == 2
    assert f"sized for {t_c} contributors" in plan.shortfall_note


def test_the_plan_is_pure() -> None:
    query = _query()
    rnd = _round(query)
    one = plan_cohort(query, rnd, _members(60), SESSION, SECURE_AGGREGATION, TERMS)
    again = plan_cohort(query, rnd, _members(60), SESSION, SECURE_AGGREGATION, TERMS)
    assert one == again
    with pytest.raises(dataclasses.FrozenInstanceError):
        one.need = 1  # type: ignore[misc]
    other = plan_cohort(query, rnd, _members(60), bytes(16), SECURE_AGGREGATION, TERMS)
    assert other.task_digest != one.task_digest  # the session id is in every assignment


def test_without_noise_nothing_is_resized() -> None:
    query = _query("none", "none")
    rnd = _round(query)
    plan = plan_cohort(query, rnd, _members(30), SESSION, SECURE_AGGREGATION, TERMS)
    assert plan.t_c is None and plan.noise is None and plan.need == rnd.need == 20 and plan.shortfall_note == ""
    assert plan.statement is None and plan.config.dim == rnd.plan.dim
    assert all(a.noise is None and a.validation is None for a in plan.assignments.values())
    assert not plan.failed_opening.reuse  # a noise-free sum must not be drawn twice over the same devices


def test_the_unmasked_protocol_changes_only_what_it_must() -> None:
    """The benchmark's session: no proofs (no statement, no limbs), devices start at masked input; the noise, the
    survivor threshold and the secagg block are those of a masked cohort of the same size."""
    query = _query()
    rnd = _round(query)
    masked = plan_cohort(query, rnd, _members(100), SESSION, SECURE_AGGREGATION, TERMS)
    plain = plan_cohort(query, rnd, _members(100), SESSION, UNMASKED, TERMS)
    assert plain.protocol is UNMASKED and plain.statement is None and plain.config.dim == rnd.plan.dim
    assert (plain.t_c, plain.noise, plain.need) == (masked.t_c, masked.noise, masked.need)
    assert dataclasses.replace(plain.config, dim=masked.config.dim) == masked.config
    assert {a.first_phase for a in plain.assignments.values()} == {Phase.MASKED_INPUT}
    assert all(a.validation is None for a in plain.assignments.values())
    assert for_benchmark(True) is UNMASKED and for_benchmark(False) is SECURE_AGGREGATION


@pytest.mark.parametrize("protocol, session_type", [(SECURE_AGGREGATION, ServerSession), (UNMASKED, PlainServerSession)])
def test_the_runtime_runs_the_plan_s_protocol(protocol, session_type) -> None:  # type: ignore[no-untyped-def]
    query = _query()
    plan = plan_cohort(query, _round(query), _members(40), SESSION, protocol, TERMS)
    keys = {d: bytes([p]) * 32 for d, p in plan.members.items()}
    tokens = {d: b"t" for d in list(plan.members)[:3]}  # not every member has one: none are relayed
    with ThreadPoolExecutor(1) as pool:
        cohort = CohortRuntime.from_plan(plan, keys, tokens, None, Metrics(), pool, lambda _: None)  # type: ignore[arg-type]
    assert type(cohort.session) is session_type and cohort.phase == plan.protocol.first_phase
    assert cohort.mode == protocol.name and cohort.secagg_dict == plan.config.to_dict()
    assert cohort.task_digest == plan.task_digest and cohort.quorum == plan.need
    assert (cohort.validation is not None) == (protocol is SECURE_AGGREGATION)
    proof = cohort.validation.proof_bytes if cohort.validation is not None else 0
    assert cohort.message_limit == cohort.session.max_message_size(proof)
    assert dict(cohort.assignments) == dict(plan.assignments)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(20, 400), dropout=st.floats(0.0, MAX_DROPOUT_ALLOWANCE - 1e-6, allow_subnormal=False), t_min=st.integers(2, 20))
def test_every_planned_cohort_meets_the_floor_and_sizes_its_noise_for_t_c(n: int, dropout: float, t_min: int) -> None:
    query = _query(t_min=t_min, dropout=dropout)
    rnd = _round(query)
    plan = plan_cohort(query, rnd, _members(n), SESSION, SECURE_AGGREGATION, TERMS)
    cfg = plan.config
    floor.check(n, cfg.resolved_degree, cfg.share_threshold)  # what every device checks: never below its floor
    assert cfg.share_threshold == floor.plan(n, dropout).threshold
    assert plan.t_c is not None and t_min <= plan.t_c <= n
    assert plan.t_c == dp.cohort_threshold(t_min, n, dropout)
    assert rnd.need <= plan.need <= n and cfg.survivor_threshold == plan.need
    assert plan.noise is not None and plan.noise.noise.t_min == plan.t_c
    # the shares of t_c survivors add up to at least the noise the round's calibration asks for at t_min
    assert rnd.noise is not None
    assert plan.noise.noise.std(plan.t_c) >= rnd.noise.noise.std(rnd.noise.noise.t_min) * (1 - 1e-9)
