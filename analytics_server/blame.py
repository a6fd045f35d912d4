"""Who masked another vector than it proved: group testing over the cohorts whose sums failed the opening check.

A failed opening (docs/validation.md) proves that at least one contributor of that cohort masked another vector
than the one its proof commits to — not which one. Pure rules, applied by `services.blame_service` and the
orchestrator:

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
- `reuse`: which contributors of a refused sum may join another cohort of the round, and how many runs of the
  query's (ε, δ) its charge must then cover.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Reuse:
    """The contributors of a refused sum that may contribute again in the round, and the runs of the query's
    (ε, δ) its charge must cover for that (none may when `why_kept` says why)."""

    allowed: frozenset[str]
    runs: int
    why_kept: str | None = None


def reuse(contributors: Iterable[str], refused: Mapping[str, int], extra_runs: int, noisy: bool,
          charge_runs: int | None) -> Reuse:
    """Contributors may join another cohort of the round only in a noisy round (each sum the server sees is then
    differentially private; in a noise-free one a second exact sum over overlapping devices could be differenced),
    only when the query carries a charge to extend (`charge_runs`), and only while each has been in at most
    `extra_runs` refused sums of the round (`refused`: device → refused sums of the round it is in, this one
    included). `runs`: the most sums of the round one of them may then enter, the runs the charge must cover."""
    if not noisy:
        return Reuse(frozenset(), 0, "a noise-free round: a second exact sum over the same devices could be differenced")
    if charge_runs is None:
        return Reuse(frozenset(), 0, "the query carries no privacy charge to extend")
    allowed = frozenset(d for d in contributors if refused.get(d, 0) <= extra_runs)
    if not allowed:
        return Reuse(frozenset(), 0, f"each already contributed to {extra_runs + 1} sums of the round (the most allowed)")
    return Reuse(allowed, 1 + max(refused.get(d, 0) for d in allowed))


__all__ = ["Reuse", "candidates", "named", "reuse"]
