"""Device-side policy costs and the noise floor's slack, as JSON (part of `make bench`).

- `floor_slack`: over a grid of (mechanism, ε, δ, rounds, t_min), the device's recomputed per-device floor as a
  fraction of the σ the server's calibration sends (σ, or √μ for Skellam): how much a lying server could shave.
- `floor_ms`: time to compute one floor from scratch (pure Python, no accountant).
- `admit_ms` / `settle_ms`: per assignment on a file-backed `LocalStore`, the policy check plus the ledger
  reservation (one SQLite transaction), and marking it sent and finished.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
import time
from pathlib import Path

from analytics_server import privacy
from device_sdk import ClientOptions, DeviceClient, DevicePolicy, LocalStore
from queries import dp
from queries.dp import floor
from queries.envelope import Assignment
from queries.kind import RoundPlan
from queries.task_digest import task_digest
from secagg.config import SecAggConfig


def slack() -> dict[str, object]:
    ratios = []
    for mech in ("discrete_gaussian", "skellam"):
        for eps in (0.1, 1.0, 8.0):
            for delta in (1e-10, 1e-6, 1e-4):
                for rounds in (1, 10, 100):
                    for t_min in (10, 1000):
                        cal = dp.calibrate_query(mech, eps, delta, rounds, t_min)
                        plan = RoundPlan(0, {}, 10, 1, 1.0, 1.0)
                        noise = privacy.round_noise(cal, plan)
                        assert noise is not None
                        f = floor.per_device_floor(mech, eps, delta, rounds, t_min, 1.0, noise.scale)
                        r = f / noise.noise.per_device_scale
                        ratios.append(r if mech == "discrete_gaussian" else math.sqrt(r))
    return {"cases": len(ratios), "min": round(min(ratios), 4), "median": round(statistics.median(ratios), 4),
            "max": round(max(ratios), 4)}


def timings() -> dict[str, float]:
    t = []
    for i in range(200):
        floor.gaussian_floor.cache_clear()
        start = time.perf_counter()
        floor.gaussian_floor(1.0 + i * 1e-6, 1e-6, 10)
        t.append(time.perf_counter() - start)
    cal = dp.calibrate_query("skellam", 1.0, 1e-6, 1, 100)
    plan = RoundPlan(0, {"buckets": ["a", "b"], "other_bucket": None, "max_contributions": 1}, 2, 1, 1.0, 1.0)
    noise = privacy.device_noise_block(privacy.round_noise(cal, plan))

    class Spec:
        class privacy:  # noqa: N801
            noise_multiplier = None

    block = privacy.assignment_privacy(Spec(), cal, plan, 1)
    with tempfile.TemporaryDirectory() as tmp:
        client = DeviceClient("http://127.0.0.1:9", LocalStore(os.path.join(tmp, "d.db")),
                              ClientOptions(policy=DevicePolicy(require_noise=True, max_epsilon_per_day=1e9, min_cohort=100)))
        admit, settle, digest = [], [], []
        for i in range(300):
            a = Assignment(query_id=f"q{i}", round=0, cohort_id=os.urandom(16).hex(), party_id=1, kind="histogram",
                           source="words", task=plan.task, threat_model="semi_honest", phase_timeout_s=5, noise=noise,
                           privacy=block, secagg=SecAggConfig(os.urandom(16), 100, 2, 40, min_survivors=100).to_dict())
            start = time.perf_counter()
            task_digest(a)
            digest.append(time.perf_counter() - start)
            start = time.perf_counter()
            c = client._admit(a)  # noqa: SLF001 (the policy check and reservation alone)
            admit.append(time.perf_counter() - start)
            start = time.perf_counter()
            c.before_send(2)  # type: ignore[union-attr]
            c.end(True, True)  # type: ignore[union-attr]
            settle.append(time.perf_counter() - start)
    ms = lambda xs: round(statistics.median(xs) * 1000, 3)  # noqa: E731
    # the task digest of a training round whose task carries a 10,000-parameter model (RFC 8785 over every float)
    weights = [math.sin(i) / 7 for i in range(10_000)]
    model = a.model_copy(update={"kind": "training", "task": {"weights": weights}})
    model_digest = []
    for _ in range(5):
        start = time.perf_counter()
        task_digest(model)
        model_digest.append(time.perf_counter() - start)
    return {"floor_ms": ms(t), "admit_ms": ms(admit), "settle_ms": ms(settle), "task_digest_ms": ms(digest),
            "task_digest_10k_weights_ms": ms(model_digest)}


if __name__ == "__main__":
    print(json.dumps({"floor_slack": slack(), **timings()}))
