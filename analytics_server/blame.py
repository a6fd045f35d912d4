"""Who masked another vector than it proved: group testing over the cohorts whose sums failed the opening check.

A failed opening (docs/validation.md) proves that at least one contributor of that cohort masked another vector
than the one its proof commits to — not which one. Two pure rules, applied by the store and the orchestrator:

- `named`: a device is named (and left out of the rest of the query) when it contributed to `quorum` failed
  cohorts that share no contributor but it. Each of those cohorts held a cheater; if the device were honest they
  would hold `quorum` different cheaters. So with fewer than `quorum` such cheaters in a query nobody honest is
  ever named, and a device that keeps cheating is named after `quorum` failures it is tested in.
- `candidates`: a new cohort of the query seats one member of each failed cohort (the one in the most failed
  cohorts, ties at random) among devices in no failed cohort, then more suspects only while no failed cohort has
  more than half its members back. Each suspect is thus tested among devices it has not failed with: a cheater that
  masks another vector again is named at once (its two failed cohorts share only it), an honest one contributes
  (its seat in the round is then taken, so the next cohort tests another). The orchestrator leaves out the failed
  cohorts a named device explains.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

T = TypeVar("T")


def named(failed: Mapping[str, frozenset[str]], quorum: int) -> dict[str, list[str]]:
    """Device → `quorum` failed cohorts (ids) it contributed to that pairwise share no other contributor.

    The largest such family is a set-packing problem; the greedy search (smallest cohorts first) only ever
    finds families that exist, so it never names a device the rule does not name — it may name one later."""
    if quorum < 1:
        raise ValueError(f"quorum: must be at least 1, got {quorum}")
    by_device: dict[str, list[str]] = {}
    for cohort, members in failed.items():
        for d in members:
            by_device.setdefault(d, []).append(cohort)
    out: dict[str, list[str]] = {}
    for d, cohorts in by_device.items():
        if len(cohorts) < quorum:
            continue
        taken: set[str] = set()
        chosen: list[str] = []
        for c in sorted(cohorts, key=lambda c: (len(failed[c]), c)):
            others = failed[c] - {d}
            if taken.isdisjoint(others):
                chosen.append(c)
                taken |= others
                if len(chosen) == quorum:
                    out[d] = sorted(chosen)
                    break
    return out


def candidates(eligible: Sequence[str], failed: Iterable[frozenset[str]], cap: int,
               sample: Callable[[list[str], int], list[str]]) -> list[str]:
    """The devices of `eligible` a new cohort may seat, in the order to take them (a cohort takes the first `cap`):
    one member of each failed cohort (the suspect in the most failed cohorts first, ties at random; at most half the
    cohort), a uniform sample of the devices in no failed cohort, then further suspects only while no failed cohort
    has more than half of its members in the list — a cohort that could only repeat a failed one (most of its
    members again) tells nothing and is not formed; the round waits for other devices instead. The rest of the
    devices in no failed cohort follow, so the list's length counts every device usable now. `sample(xs, k)` draws
    k of xs without replacement (the orchestrator's randomness)."""
    groups = [g for g in failed if g]
    suspects = set().union(*groups) if groups else set()
    fresh = [d for d in eligible if d not in suspects]
    pending = [d for d in eligible if d in suspects]
    slots: list[str] = []
    fills: list[str] = []
    if pending:
        counts = {d: sum(d in g for g in groups) for d in pending}
        order = sorted(sample(pending, len(pending)), key=lambda d: -counts[d])  # stable: random among equals
        taken = [0] * len(groups)
        for d in order:  # one test slot per failed cohort
            mine = [i for i, g in enumerate(groups) if d in g]
            if all(taken[i] == 0 for i in mine):
                slots.append(d)
                for i in mine:
                    taken[i] += 1
        for d in order:  # more suspects while every failed cohort keeps at most half its members out of the list
            mine = [i for i, g in enumerate(groups) if d in g]
            if d not in slots and all(taken[i] + 1 <= len(groups[i]) // 2 for i in mine):
                fills.append(d)
                for i in mine:
                    taken[i] += 1
    first = slots[: max(1, cap // 2)]
    picked = sample(fresh, min(cap - len(first), len(fresh)))
    chosen = set(picked)
    rest = [d for d in fresh if d not in chosen] if len(picked) < len(fresh) else []
    return first + picked + slots[len(first):] + fills + rest


__all__ = ["candidates", "named"]
