"""heavy_hitters: the three-device example, the paper's calibration table (Zhu et al., Table 1), device
votes, decoding and thresholds, spec validation, and the evaluation tool."""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from queries.heavy_hitters import calibration as cal
from fleet_sim import evaluate_heavy_hitters as evaluate
from queries.heavy_hitters.encoding import DEFAULT_ALPHABET, choose_words
from queries.heavy_hitters.kind import HeavyHittersKind
from queries.kind import AggregateNoise, QueryKindError
from queries.local_run import run_locally

KIND = HeavyHittersKind()
WIDTH = len(DEFAULT_ALPHABET) + 1
RNG = np.random.default_rng(0)  # votes use no randomness


def slot(block: int, ch: str | None) -> int:
    return block * WIDTH + (len(DEFAULT_ALPHABET) if ch is None else DEFAULT_ALPHABET.index(ch))


# --- acceptance: three devices ----------------------------------------------------------------------


@pytest.mark.parametrize("raw", [
    {"mode": "triehh", "theta": 1, "sample_rate": 1.0},
    {"mode": "secagg", "release_threshold": 1},
])
def test_three_devices_find_exactly_their_words(raw):
    result, contributors = run_locally(KIND, raw, [["hello"], ["hey"], ["hi"]])
    assert {h["value"] for h in result["heavy_hitters"]} == {"hello", "hey", "hi"}
    assert all(h["count"] == 1 for h in result["heavy_hitters"])
    assert result["trie"] == {"h": 3, "he": 2, "hi": 1, "hel": 1, "hey": 1, "hell": 1, "hello": 1}
    assert result["rounds"] == 6  # h, e/i, l/y/$, l/$, o, $
    assert contributors == [3] * 6


# --- acceptance: the calibration table of Zhu et al., Table 1 (ε = 2, L = 10) ----------------------

TABLE = {  # n: (θ, m/√n) for δ ≤ 1/(300n), then for δ ≤ 1/n²
    10**4: ((10, 1.81), (12, 1.51)),
    10**5: ((11, 5.21), (14, 4.09)),
    10**6: ((12, 15.10), (15, 12.08)),
    10**7: ((13, 44.09), (17, 33.71)),
}


@pytest.mark.parametrize("n", sorted(TABLE))
@pytest.mark.parametrize("case", [0, 1])
def test_calibration_reproduces_seed_table(n, case):
    delta = 1 / (300 * n) if case == 0 else 1 / n**2
    c = cal.calibrate_triehh(epsilon=2.0, delta=delta, rounds=10, population_size=n)
    theta, gamma = TABLE[n][case]
    assert c.theta == theta
    assert math.floor(c.gamma * 100 + 1e-9) / 100 == pytest.approx(gamma)  # the table truncates
    assert c.epsilon == pytest.approx(2.0, rel=1e-12)
    assert c.delta <= delta
    assert c.expected_sample == pytest.approx(c.gamma * math.sqrt(n))


def test_epsilon_matches_theorem_form():
    # ε = L·ln(1 + 1/(√n/(γθ) − 1)) with γ = m/√n equals −L·ln(1 − qθ) with q = m/n.
    n, theta, m, rounds = 10**6, 12, 15_000, 10
    gamma = m / math.sqrt(n)
    paper = rounds * math.log(1 + 1 / (math.sqrt(n) / (gamma * theta) - 1))
    assert cal.triehh_epsilon(theta, m / n, rounds) == pytest.approx(paper, rel=1e-12)
    assert cal.triehh_delta(theta) == pytest.approx(10 / (9 * math.factorial(12)))


def test_theta_is_smallest_meeting_delta():
    for delta in (1e-3, 1e-6, 1e-9, 1e-14, 1e-40):
        t = cal.triehh_theta(delta, epsilon=1.0, rounds=10)
        assert cal.triehh_delta(t) <= delta
        assert t == cal.MIN_THETA or cal.triehh_delta(t - 1) > delta


def test_group_privacy_for_several_words_per_device():
    one = cal.calibrate_triehh(2.0, 1e-8, 10, max_words_per_device=1)
    three = cal.calibrate_triehh(2.0, 1e-8, 10, max_words_per_device=3)
    assert three.epsilon == pytest.approx(2.0) and three.delta <= 1e-8
    assert three.sample_rate < one.sample_rate and three.theta >= one.theta


def test_calibration_errors_name_the_parameter():
    with pytest.raises(cal.CalibrationError, match="population_size"):
        cal.calibrate_triehh(1.0, 1e-10, 10, population_size=1000)  # m = q·n < θ
    with pytest.raises(cal.CalibrationError, match="delta"):
        cal.calibrate_triehh(1.0, 0.0, 10)
    with pytest.raises(cal.CalibrationError, match="sample_rate"):
        cal.triehh_epsilon(10, 0.5, 10)
    with pytest.raises(cal.CalibrationError, match="theta"):
        cal.triehh_delta(3)


# --- device side ------------------------------------------------------------------------------------


def task(depth: int, frontier: list[str], **kw):
    plan = KIND.plan_round(KIND.parse_params({"mode": "secagg", **kw}),
                           dataclasses.replace(KIND.initial_state(KIND.parse_params({"mode": "secagg", **kw})),
                                               depth=depth, frontier=frontier), 0)
    assert plan is not None
    return plan


def test_vote_layout_next_char_end_marker_and_zero():
    plan = task(2, ["he", "hi"])
    assert plan.dim == 2 * WIDTH and plan.max_abs == 1
    v = KIND.contribute(plan.typed_task(KIND), ["hello"], RNG)
    assert v.dtype == np.int64 and v.shape == (plan.dim,)
    assert np.flatnonzero(v).tolist() == [slot(0, "l")]
    assert np.flatnonzero(KIND.contribute(plan.typed_task(KIND), ["hi"], RNG)).tolist() == [slot(1, None)]
    # prefix not on the frontier, too short, or nothing eligible: all zeros (taking part reveals nothing)
    for rows in (["moon"], ["h"], [], ["h\u00e9llo"], [42, None]):
        assert not KIND.contribute(plan.typed_task(KIND), rows, RNG).any()


def test_device_takes_its_most_frequent_string_with_deterministic_ties():
    plan = task(0, [""])
    v = KIND.contribute(plan.typed_task(KIND), ["sun", "moon", "moon", "star"], RNG)
    assert np.flatnonzero(v).tolist() == [slot(0, "m")]
    # tie between "sun" and "bee": lexicographically smallest wins, whatever the row order
    for rows in (["sun", "bee"], ["bee", "sun"]):
        assert np.flatnonzero(KIND.contribute(plan.typed_task(KIND), rows, RNG)).tolist() == [slot(0, "b")]


def test_normalisation_and_ineligible_strings():
    assert choose_words(["  Moon ", "MOON", "sun"], DEFAULT_ALPHABET, 10, 1) == ["moon"]
    assert choose_words(["Moon", "MOON", "sun"], DEFAULT_ALPHABET, 10, 1, casefold=False) == ["sun"]
    # foreign characters and over-long strings are dropped, not mapped; the next eligible string is used
    assert choose_words(["café", "café", "tea"], DEFAULT_ALPHABET, 10, 1) == ["tea"]
    assert choose_words(["abcdefghijk", "abc"], DEFAULT_ALPHABET, 10, 1) == ["abc"]
    assert choose_words(["ｍｏｏｎ"], DEFAULT_ALPHABET, 10, 1) == ["moon"]  # NFKC folds full-width letters


def test_several_words_per_device_are_bounded_and_deduplicated():
    plan = task(2, ["he"], max_words_per_device=3)
    assert plan.l1_sensitivity == 3 and plan.l2_sensitivity == pytest.approx(math.sqrt(3))
    v = KIND.contribute(plan.typed_task(KIND), ["hello", "help", "hey", "hex", "hen"], RNG)
    assert set(np.unique(v)) <= {0, 1}
    # top three by (count, string): hello, help, hen → 'l' (once, shared by hello/help) and 'n'
    assert np.flatnonzero(v).tolist() == [slot(0, "l"), slot(0, "n")]
    assert int(v.sum()) <= plan.l1_sensitivity


@pytest.mark.parametrize("bad, field", [
    ({"depth": "x"}, "task"),
    ({"frontier": ["abc"]}, "task.frontier"),
    ({"alphabet": "aa"}, "task.alphabet"),
    ({"depth": 10}, "task.depth"),
    ({"max_words": 99}, "task.max_words"),
])
def test_malformed_task_raises_typed_error(bad, field):
    plan = task(1, ["a", "b"])
    with pytest.raises(QueryKindError, match=field):
        KIND.parse_task({**plan.task, **bad})
    broken = dict(plan.task)
    del broken["frontier"]
    with pytest.raises(QueryKindError, match="task"):
        KIND.parse_task(broken)


# --- server side ------------------------------------------------------------------------------------


def run_exact(strings: list[str], theta: int, **kw):
    return run_locally(KIND, {"mode": "triehh", "theta": theta, "sample_rate": 1.0, **kw},
                       [[s] for s in strings])[0]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(alphabet="abc", min_size=1, max_size=4), min_size=1, max_size=40),
       st.integers(min_value=1, max_value=4))
def test_without_sampling_or_noise_the_result_is_exact(strings, theta):
    result = run_exact(strings, theta, max_length=4)
    truth = Counter(strings)
    assert {h["value"]: h["count"] for h in result["heavy_hitters"]} == {s: c for s, c in truth.items() if c >= theta}
    counts = [h["count"] for h in result["heavy_hitters"]]
    assert counts == sorted(counts, reverse=True)
    # nothing with fewer than θ votes is ever released, and every trie count is the true prefix count
    for prefix, count in result["trie"].items():
        assert count >= theta
        assert count == sum(c for s, c in truth.items() if s.startswith(prefix))
    assert result["rounds"] <= 4


def test_strings_of_max_length_finish_without_an_end_marker_round():
    result = run_exact(["abcd"] * 3 + ["ab"] * 2, 2, max_length=4)
    assert {h["value"]: h["count"] for h in result["heavy_hitters"]} == {"abcd": 3, "ab": 2}
    assert result["rounds"] == 4


def test_frontier_is_capped_by_highest_counts():
    strings = ["aa"] * 5 + ["bb"] * 4 + ["cc"] * 3 + ["dd"] * 2
    params = KIND.parse_params({"mode": "triehh", "theta": 1, "sample_rate": 1.0, "max_frontier": 2})
    state = KIND.initial_state(params)
    plan = KIND.plan_round(params, state, 0)
    agg = sum(KIND.contribute(plan.typed_task(KIND), [s], RNG) for s in strings)
    state = KIND.decode_round(params, state, plan, agg, len(strings))
    assert state.frontier == ["a", "b"] and state.frontier_truncated == 2
    assert KIND.state_from_json(json.loads(json.dumps(KIND.state_to_json(state)))) == state
    assert KIND.plan_round(params, state, 1).dim == 2 * WIDTH
    result = run_exact(strings, 1, max_frontier=2)
    assert [h["value"] for h in result["heavy_hitters"]] == ["aa", "bb"]


def test_decode_rejects_wrong_length_and_ignores_root_end_marker():
    params = KIND.parse_params({"mode": "secagg", "release_threshold": 2})
    state = KIND.initial_state(params)
    plan = KIND.plan_round(params, state, 0)
    with pytest.raises(QueryKindError, match="aggregate"):
        KIND.decode_round(params, state, plan, np.zeros(plan.dim + 1, dtype=np.int64), 1)
    agg = np.zeros(plan.dim, dtype=np.int64)
    agg[slot(0, None)] = 50  # noise on the root's end marker: the empty string is never a heavy hitter
    agg[slot(0, "x")] = 1  # below the threshold
    state = KIND.decode_round(params, state, plan, agg, 10)
    assert state.found == {} and state.frontier == []
    assert KIND.plan_round(params, state, 1) is None


def test_secagg_default_threshold_follows_the_noise():
    params = KIND.parse_params({"mode": "secagg", "false_release_rate": 0.01})
    plan = KIND.plan_round(params, KIND.initial_state(params), 0)
    assert KIND.threshold(params, plan, 100) == 1  # no noise: min_release_count
    from statistics import NormalDist
    expected = math.ceil(NormalDist().inv_cdf(1 - 0.01 / plan.dim) * 10.0)
    assert KIND.threshold(params, plan, 100, AggregateNoise(std=10.0)) == expected
    # the server's calibrated round noise (discrete Gaussian shares of 400 contributors): queries.dp's
    # rigorous tail bound, in the kind's units when devices scaled their vectors by s = 4
    from queries import dp
    round_noise = dp.round_noise(dp.calibrate_query("discrete_gaussian", 1.0, 1e-6, 1, 400), 1.0, 1.0)
    x = dp.release_threshold(round_noise, 400, plan.dim, 0.01)
    assert KIND.threshold(params, plan, 400, AggregateNoise.of_round(round_noise, 400)) == max(1, x)
    scaled = AggregateNoise.of_round(round_noise, 400, 4)
    assert scaled.std == pytest.approx(round_noise.std(400) / 4)
    assert KIND.threshold(params, plan, 400, scaled) == max(1, math.ceil(x / 4 + 0.5))
    # false releases: a zero aggregate plus Gaussian noise at that threshold rarely releases anything
    rng = np.random.default_rng(3)
    released = sum(int((np.rint(rng.normal(0, 10.0, plan.dim)) >= expected).any()) for _ in range(300))
    assert released <= 12  # expected ≤ 3 (1 %); the bound fails with probability < 1e-5


def test_plan_declares_sampling_sensitivity_and_rounds():
    params = KIND.parse_params({"mode": "triehh", "epsilon": 2.0, "delta": 1e-10, "population_size": 10**5})
    plan = KIND.plan_round(params, KIND.initial_state(params), 0)
    c = cal.calibrate_triehh(2.0, 1e-10, 10, 10**5)
    assert plan.sample_rate == pytest.approx(c.sample_rate) and params.triehh[0] == c.theta
    assert (plan.l1_sensitivity, plan.l2_sensitivity, plan.max_abs) == (1.0, 1.0, 1)
    assert KIND.rounds_upper_bound(params) == 10
    block = KIND.privacy(params)
    assert block["epsilon"] == pytest.approx(2.0) and block["delta"] <= 1e-10 and block["theta"] == c.theta
    secagg = KIND.parse_params({"mode": "secagg", "max_length": 7})
    assert KIND.plan_round(secagg, KIND.initial_state(secagg), 0).sample_rate == 1.0
    assert KIND.rounds_upper_bound(secagg) == 7 and KIND.privacy(secagg) is None
    hand = KIND.privacy(KIND.parse_params({"mode": "triehh", "theta": 1, "sample_rate": 1.0}))
    assert hand["epsilon"] is None and "no DP guarantee" in hand["note"]


# --- spec validation --------------------------------------------------------------------------------


@pytest.mark.parametrize("raw, field", [
    ({}, "mode"),
    ({"mode": "triehh2"}, "mode"),
    ({"mode": "secagg", "max_length": 0}, "max_length"),
    ({"mode": "secagg", "alphabet": "abca"}, "alphabet"),
    ({"mode": "secagg", "alphabet": "ab c"}, "alphabet"),
    ({"mode": "secagg", "max_words_per_device": 100}, "max_words_per_device"),
    ({"mode": "secagg", "max_frontier": 0}, "max_frontier"),
    ({"mode": "secagg", "epsilon": 1.0}, "epsilon"),
    ({"mode": "secagg", "theta": 5}, "theta"),
    ({"mode": "secagg", "release_threshold": -1}, "release_threshold"),
    ({"mode": "secagg", "bogus": 1}, "bogus"),
    ({"mode": "triehh"}, "epsilon"),
    ({"mode": "triehh", "epsilon": 1.0}, "delta"),
    ({"mode": "triehh", "delta": 1e-9}, "epsilon"),
    ({"mode": "triehh", "epsilon": 1.0, "delta": 1e-9, "theta": 9}, "theta"),
    ({"mode": "triehh", "theta": 9}, "sample_rate"),
    ({"mode": "triehh", "sample_rate": 0.1}, "theta"),
    ({"mode": "triehh", "sample_rate": 1.5, "theta": 2}, "sample_rate"),
    ({"mode": "triehh", "epsilon": 1.0, "delta": 1e-9, "release_threshold": 3}, "release_threshold"),
    ({"mode": "triehh", "epsilon": 1.0, "delta": 1e-10, "population_size": 500}, "population_size"),
    ({"mode": "triehh", "epsilon": "lots", "delta": 1e-10}, "epsilon"),
])
def test_bad_params_name_the_field(raw, field):
    with pytest.raises(ValidationError) as info:
        KIND.parse_params(raw)
    assert field in str(info.value)


# --- evaluation tool --------------------------------------------------------------------------------


def test_score_counts_ties_and_empty_results():
    strings = ["a"] * 5 + ["b"] * 3 + ["c"] * 3 + ["d"]
    assert evaluate.score(strings, ["a", "c"], 2) == {"recall": 1.0, "precision": 1.0, "f1": 1.0}
    s = evaluate.score(strings, ["d", "a", "b"], 2)
    assert (s["recall"], s["precision"]) == (0.5, 0.5)
    assert evaluate.score(strings, [], 2) == {"recall": 0.0, "precision": 0.0, "f1": 0.0}


@pytest.mark.parametrize("mechanism", ["skellam", "discrete_gaussian"])
def test_evaluate_secagg_finds_planted_words_under_noise(mechanism):
    rng = np.random.default_rng(5)
    planted = {"moon": 400, "sun": 300, "star": 250, "stars": 200, "comet": 150}
    strings = [w for w, c in planted.items() for _ in range(c)]
    strings += [w for w in rng.choice(["x" + str(i) for i in range(500)], 700)]
    out = evaluate.run("secagg", strings, epsilon=2.0, delta=1e-8, k=5, seed=1, mechanism=mechanism)
    assert out["recall"] == 1.0 and out["precision"] == 1.0
    assert out["epsilon"] == pytest.approx(2.0, rel=0.02)
    assert all(t > 1 for t in out["release_thresholds"])
    counts = {h["value"]: h["count"] for h in out["top"]}
    for w, c in planted.items():
        assert abs(counts[w] - c) < 6 * max(out["noise_std_per_round"])


def test_evaluate_cli_prints_json(tmp_path, capsys):
    rc = evaluate.main(["--mode", "triehh", "--n", "20000", "--population", "zipf", "--epsilon", "4",
                        "--k", "10", "--seed", "3", "--vocab", "300"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert {"recall", "precision", "f1", "rounds", "epsilon", "theta", "sample_rate"} <= set(out)
    assert out["epsilon"] == pytest.approx(4.0) and out["delta"] <= 1 / 20000**2  # achieved δ ≤ default 1/n²
    assert 0 < out["rounds"] <= 10 and out["precision"] == 1.0 and out["recall"] > 0
    path = tmp_path / "pop.txt"
    path.write_text("\n".join(["moon"] * 300 + ["Sun"] * 200 + ["sun"] * 100 + ["kite"] * 20) + "\n")
    rc = evaluate.main(["--mode", "secagg", "--population-file", str(path), "--epsilon", "4", "--k", "2",
                        "--seed", "1"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n"] == 620 and out["recall"] == 1.0
    assert [h["value"] for h in out["top"]][:2] == ["moon", "sun"]
    assert evaluate.main(["--mode", "triehh", "--n", "500", "--epsilon", "1", "--seed", "1"]) == 2
    assert "population_size" in capsys.readouterr().err


# --- binding the spec's privacy block (QueryKind.bind_privacy) ------------------------------------------


def test_bind_privacy_triehh_copies_epsilon_delta_and_refuses_noise() -> None:
    from queries.kind import QueryKindError
    from queries.spec import PrivacySpec

    raw = {"mode": "triehh", "max_length": 6}
    bound = KIND.bind_privacy(raw, PrivacySpec(epsilon=4.0, delta=1e-6))
    assert bound == {**raw, "epsilon": 4.0, "delta": 1e-6}
    c = cal.calibrate_triehh(4.0, 1e-6, 6)
    assert KIND.parse_params(bound).triehh == (c.theta, pytest.approx(c.sample_rate))
    assert KIND.bind_privacy(raw, PrivacySpec()) == raw  # nothing to copy
    with pytest.raises(QueryKindError, match="privacy.mechanism"):
        KIND.bind_privacy(raw, PrivacySpec(epsilon=1.0, delta=1e-6, mechanism="skellam"))
    with pytest.raises(QueryKindError, match="params.epsilon"):
        KIND.bind_privacy({**raw, "epsilon": 2.0}, PrivacySpec(epsilon=1.0, delta=1e-6))
    with pytest.raises(QueryKindError, match="params.theta"):
        KIND.bind_privacy({**raw, "theta": 5, "sample_rate": 0.1}, PrivacySpec(epsilon=1.0, delta=1e-6))
    secagg = {"mode": "secagg"}
    assert KIND.bind_privacy(secagg, PrivacySpec(epsilon=1.0, delta=1e-6, mechanism="skellam")) == secagg


def test_release_reports_thresholds_and_the_noise_of_each_released_count():
    params = KIND.parse_params({"mode": "secagg", "release_threshold": 2, "max_length": 2, "alphabet": "ab"})
    state = KIND.initial_state(params)
    stds = [3.0, 5.0]
    for depth, std in enumerate(stds):
        plan = KIND.plan_round(params, state, depth)
        agg = sum(KIND.contribute(plan.typed_task(KIND), [w], RNG) for w in ["a"] * 3 + ["ab"] * 4)
        state = KIND.decode_round(params, state, plan, agg, 7, AggregateNoise(std=std))
    assert KIND.plan_round(params, state, 2) is None
    release = KIND.finalize(params, state)
    assert release.result["heavy_hitters"] == [{"value": "ab", "count": 4}, {"value": "a", "count": 3}]
    assert release.thresholds == {"release_thresholds": [2, 2]} == {"release_thresholds": release.result["thresholds"]}
    # "ab" (length L) was counted as an extension in round 1, "a" by its end marker in round 1, "a" in round 0
    assert release.noise_std == {"/heavy_hitters/0/count": 5.0, "/heavy_hitters/1/count": 5.0,
                                 "/trie/a": 3.0, "/trie/ab": 5.0}
