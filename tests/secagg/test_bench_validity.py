"""scripts/bench_validity.py's JS half proves what it is given with the built JS SDK (`make test` builds it) and
reports a time and the proof's size, which must be the size the statement fixes in both languages."""

from __future__ import annotations

from devstack.js_fleet import js_missing
from scripts import bench_validity
from secagg.validity import Bits, Ranged, Statement, proof_size


def test_the_js_sdk_proves_the_benchmark_cases() -> None:
    assert js_missing() is None, js_missing()
    noisy = Statement((Bits(4, 1), Ranged(2, -3, 10)), 2, 5)
    cases = [("one_hot", Statement((Bits(4, 1),)), [0, 1, 0, 0], None, 1),
             ("noisy", noisy, [0, 0, 1, 0, -3, 10], [5, -5, 0, 1, 2, -1], 2)]
    out = bench_validity.js_proving(cases)
    assert [c["case"] for c in out["cases"]] == ["one_hot", "noisy"]
    for (_, statement, *_rest), got in zip(cases, out["cases"]):
        assert got["proof_bytes"] == proof_size(statement) and got["device_prove_ms"] > 0
