"""What a simulated fleet can prove in time: the validity proofs' cost on the device side, for the demo and the
end-to-end tier.

A real device proves once per round, for itself (milliseconds for a histogram, up to about a second for a 30-feature
`feature_stats` round on this machine). A fleet simulator proves for every device it runs, on the machine's two
cores, before each device can answer the cohort's first phases, so one cohort of a big statement keeps it busy for
minutes. `fit` therefore gives a spec without a `privacy.validation` of its own either a phase deadline long enough
for its fleet to prove (`PHASE_MARGIN` × the fleet's proving time on top of the deadline), or — when that would
exceed `cap_s` — `"validation": "none"`, and says which and why. The server's default is proofs either way; this
only decides what the simulated fleet is asked to do.
"""

from __future__ import annotations

import os
import time
from typing import Any

PHASE_MARGIN = 2.0
"""A phase gets this many times the fleet's proving time for one cohort on top of its deadline."""


def proving_seconds(spec: dict[str, Any]) -> float:
    """One simulated device's time to prove its contribution to the heaviest round of the spec: the server's own
    statements for the rounds it plans at submit (their checks, calibration and noise bound) and the kind's
    `largest_validity` (a full heavy-hitters frontier), each proved once here. 0 when the server would refuse the spec
    or run it without proofs."""
    from analytics_server import noise_plan, privacy, spec_check, validation
    from analytics_server.settings import Settings
    from secagg.randomness import OsRandom
    from secagg.validity import ProofContext, Ranged, prove

    try:
        checked = spec_check.check_spec(spec, Settings())
    except Exception:  # noqa: BLE001 - a spec the server refuses: submitting it shows why
        return 0.0
    if checked.spec.privacy.validation != "proofs":
        return 0.0
    kind, params = checked.kind, checked.params
    plans = noise_plan.preview_rounds(kind, params, kind.initial_state(params), checked.spec.cohort.min_clients)
    statements = [st for plan in plans
                  if (st := validation.round_statement(checked.spec, kind, plan,
                                                       privacy.round_noise(checked.calibration, plan),
                                                       checked.calibration)) is not None]
    largest = kind.largest_validity(params)
    if largest is not None and statements:  # later rounds grow (a heavy-hitters frontier): at the widest noise bound
        widest = max(statements, key=lambda st: st.noise_bound)
        statements.append(largest.with_noise(widest.encoding_scale, widest.noise_bound))
    worst = 0.0
    for st in statements:
        values = [seg.low if isinstance(seg, Ranged) else 0 for seg in st.segments for _ in range(seg.size)]
        if st.check(values) is not None:
            continue
        started = time.perf_counter()
        prove(st, ProofContext(bytes(16), "fleet", 0, 1), values, [0] * st.dim if st.noise_bound else None, OsRandom())
        worst = max(worst, time.perf_counter() - started)
    return worst


def fleet_seconds(spec: dict[str, Any], processes: int) -> float:
    """The fleet's time to prove for one cohort (`cohort.max_clients` devices) on `processes` fa-sim processes, at
    most one per core."""
    cohort = spec.get("cohort")
    devices = int(cohort.get("max_clients") or 0) if isinstance(cohort, dict) else 0
    return proving_seconds(spec) * devices / max(1, min(processes, os.cpu_count() or 1))


def fit(spec: dict[str, Any], processes: int, cap_s: float) -> tuple[dict[str, Any], str | None]:
    """(the spec to submit, a note or None). A spec that names its validation, or has no numeric phase deadline, is
    left as it is."""
    privacy = spec.get("privacy", {})
    cohort = spec.get("cohort")
    if not isinstance(privacy, dict) or "validation" in privacy or not isinstance(cohort, dict):
        return spec, None
    given = cohort.get("phase_timeout_s", 0.0)
    if not isinstance(given, (int, float)) or isinstance(given, bool):
        return spec, None
    seconds = fleet_seconds(spec, processes)
    if seconds <= 0.05 * max(float(given), 1.0):
        return spec, None
    if seconds <= cap_s:
        extra = round(PHASE_MARGIN * seconds, 1)
        return ({**spec, "cohort": {**cohort, "phase_timeout_s": round(float(given) + extra, 1)}},
                f"validity proofs: the simulated fleet proves for a cohort in ≈ {seconds:.1f} s, so phases get "
                f"{extra:g} s more")
    return ({**spec, "privacy": {**privacy, "validation": "none"}},
            f"validity proofs off for this query: the simulated fleet would need ≈ {seconds:.0f} s to prove for one "
            f"cohort on {processes} process(es) (a real device proves once, for itself: docs/validation.md, \"Costs\")")
