"""The failed openings' group test (analytics_server/blame.py): who is named, and how cohorts are drawn after a
failure — with the attacker's view: fewer cheaters than the quorum never get an honest device named, and a
device that keeps cheating is named once it is tested."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics_server.blame import candidates, named, reuse


def _sample(seed: int):  # noqa: ANN202 - a test's deterministic stand-in for the server's OS randomness
    rng = random.Random(seed)
    return lambda xs, k: rng.sample(list(xs), k)


def test_a_device_in_two_failed_cohorts_that_share_only_it_is_named() -> None:
    failed = {"f1": frozenset("abcd"), "f2": frozenset("aefg")}
    assert named(failed, 2) == {"a": ["f1", "f2"]}
    assert named(failed, 3) == {}
    # sharing another device too: either could be the cheater of both, nobody is named
    assert named({"f1": frozenset("abcd"), "f2": frozenset("abef")}, 2) == {}
    # …until a third failure separates them
    assert named({"f1": frozenset("abcd"), "f2": frozenset("abef"), "f3": frozenset("axyz")}, 2) == {"a": ["f1", "f3"]}
    with pytest.raises(ValueError, match="quorum"):
        named(failed, 0)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_fewer_cheaters_than_the_quorum_never_get_an_honest_device_named(data: st.DataObject) -> None:
    """Any history of failed cohorts an attacker can arrange — each failed cohort holds at least one of its k
    cheaters (k < quorum) — names no honest device."""
    devices = [f"d{i}" for i in range(12)]
    quorum = data.draw(st.integers(2, 4))
    cheaters = data.draw(st.sets(st.sampled_from(devices), min_size=1, max_size=quorum - 1))
    failed = {}
    for j in range(data.draw(st.integers(1, 10))):
        members = data.draw(st.sets(st.sampled_from(devices), min_size=1, max_size=8))
        members |= {data.draw(st.sampled_from(sorted(cheaters)))}
        failed[f"f{j}"] = frozenset(members)
    assert set(named(failed, quorum)) <= cheaters


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32), st.integers(2, 8), st.integers(8, 40))
def test_a_persistent_cheater_is_named_and_the_round_completes(seed: int, n: int, fleet: int) -> None:
    """Simulate the orchestrator: cohorts of n drawn by `choose_members` from a fleet with one device that always
    masks another vector; a failed cohort's members may be drawn again. Only the cheater is ever named; with
    2n − 1 devices or more it is named or sits out and a cohort completes (with fewer, every two cohorts of n share
    more than one device and no group test can single it out)."""
    devices = [f"d{i}" for i in range(fleet)]
    cheater = devices[seed % fleet]
    sample = _sample(seed)
    failed: dict[str, frozenset[str]] = {}
    clean = False
    for step in range(3 * fleet):
        out = set(named(failed, 2))
        eligible = [d for d in devices if d not in out]
        assert len(eligible) >= n, "only the cheater is ever named"
        unexplained = [g for g in failed.values() if g.isdisjoint(out)]  # as the orchestrator passes them: a named
        usable = candidates(eligible, unexplained, n, sample)  # cheater's failed cohorts hold back nobody
        if len(usable) < n:
            break  # the round waits for other devices rather than repeat a failed cohort
        cohort = frozenset(usable[:n])
        if cheater not in cohort:
            clean = True  # the round completes from honest devices
            break
        failed[f"f{step}"] = cohort
    assert set(named(failed, 2)) <= {cheater}
    if fleet >= 2 * n - 1:  # two cohorts can share only the cheater: it is named, and the round completes
        assert clean
    if fleet >= 2 * n:  # enough devices in no failed cohort: a second failure names it, the third cohort is clean
        assert len(failed) <= 2
        assert len(failed) < 2 or cheater in named(failed, 2)


def test_after_a_failure_a_cohort_tests_one_suspect_per_failed_cohort_and_never_repeats_one() -> None:
    failed = [frozenset({"a", "b", "c"}), frozenset({"c", "d"})]
    fresh = ["x", "y", "z"]
    got = candidates(fresh + ["a", "b", "c", "d"], failed, 5, _sample(1))
    # c is in both failed cohorts: it takes both test slots, first; then the fresh devices; no failed cohort of 3
    # or 2 may have more than one member back, so nobody else
    assert got[0] == "c" and set(got[1:]) == set(fresh) and len(got) == 4
    # too few devices for a cohort that is not mostly a failed one: the list is short, the round waits
    assert candidates(["a", "b", "c", "d"], failed, 4, _sample(2)) == ["c"]
    # a large failed cohort may give back up to half its members
    big = frozenset(f"s{i}" for i in range(10))
    got = candidates(sorted(big) + ["x"], [big], 8, _sample(3))
    assert got[0] in big and got[1] == "x" and len(got) == 6 and set(got) - {"x"} < big
    # plenty of fresh devices: the test slot still comes first, the rest of the cohort is fresh, all are counted
    got = candidates(fresh + ["a"], failed, 2, _sample(4))
    assert got[0] == "a" and got[1] in fresh and len(got) == 4
    # nothing failed: a uniform sample first, every device counted
    got = candidates(fresh, [], 2, _sample(5))
    assert sorted(got) == sorted(fresh) and len(set(got)) == 3


def test_a_suspect_with_more_failures_is_tested_first() -> None:
    failed = [frozenset({"a", "b"}), frozenset({"a", "c"}), frozenset({"b", "d"})]
    for seed in range(20):
        got = candidates(["x", "a", "b", "c", "d"], failed, 4, _sample(seed))
        # a and b are in two failed cohorts each: the first slot is one of them (it covers two failed cohorts);
        # the third failed cohort's slot is the other's partner or the other
        assert got[0] in {"a", "b"} and "x" in got


def test_reuse_frees_contributors_only_in_a_noisy_round_with_a_charge_and_runs_left() -> None:
    devs = frozenset({"a", "b", "c"})
    assert reuse(devs, {}, 2, noisy=False, charge_runs=1).allowed == frozenset()
    assert "noise-free" in (reuse(devs, {}, 2, noisy=False, charge_runs=1).why_kept or "")
    assert reuse(devs, {}, 2, noisy=True, charge_runs=None).why_kept == "the query carries no privacy charge to extend"
    out = reuse(devs, {"a": 1, "b": 2, "c": 3}, 2, noisy=True, charge_runs=1)
    assert out.allowed == {"a", "b"} and out.runs == 3 and out.why_kept is None  # b enters a third sum of the round
    kept = reuse(devs, {"a": 3, "b": 3, "c": 3}, 2, noisy=True, charge_runs=3)
    assert kept.allowed == frozenset() and kept.why_kept == "each already contributed to 3 sums of the round (the most allowed)"


@given(refused=st.dictionaries(st.sampled_from("abcdef"), st.integers(min_value=1, max_value=5), min_size=1),
       extra=st.integers(min_value=0, max_value=4))
def test_reuse_never_lets_a_device_into_more_sums_than_the_runs_it_charges(refused: dict[str, int], extra: int) -> None:
    out = reuse(refused, refused, extra, noisy=True, charge_runs=1)
    assert all(refused[d] <= extra for d in out.allowed)
    assert all(refused[d] + 1 <= out.runs <= extra + 1 for d in out.allowed)

