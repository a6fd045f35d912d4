"""Demo: an in-process secure aggregation of a few hundred simulated devices with dropouts in every
phase; prints per-phase figures and whether the server's sum matched the true sum."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from secagg.config import SecAggConfig
from secagg.graph import NeighbourGraph
from secagg.phases import Phase
from secagg.randomness import RandomSource, SeededRandom, uint64s
from secagg.simulate import PROTOCOL_PHASES, expected_sum, protocol_randomness, run_session


def _advertise_drops(n: int, rng: RandomSource, dropout: float) -> set[int]:
    """The parties that never advertise keys (drawn before the graph exists: it is drawn from their keys)."""
    return {p for p in range(1, n + 1) if rng.random() < dropout}


def _drops_within_tolerance(cfg: SecAggConfig, rng: RandomSource, dropout: float,
                            gone: set[int]) -> Callable[[NeighbourGraph], dict[Phase, set[int]]]:
    """Random drops per later phase, redrawn (up to 50 times) until every neighbourhood keeps its threshold — decided
    once phase 0 closed, when the server drew the graph from the members root (`run_session(later_drops=…)`).

    The demo shows the success path; aborts below the threshold are covered by the tests and the bench.
    """

    def draw(graph: NeighbourGraph) -> dict[Phase, set[int]]:
        for _ in range(50):
            alive = [p for p in range(1, cfg.n + 1) if p not in gone]
            drops: dict[Phase, set[int]] = {}
            for phase in PROTOCOL_PHASES[1:]:
                k = sum(rng.random() < dropout for _ in alive)
                drops[phase] = set(rng.sample(alive, k))
                alive = [p for p in alive if p not in drops[phase]]
            survivors = set(alive)
            if len(survivors) >= cfg.survivor_threshold and all(
                len(graph.closed_set(u) & survivors) >= cfg.share_threshold for u in survivors
            ):
                return drops
        raise SystemExit(f"could not draw drops within tolerance at dropout {dropout}; lower --dropout")

    return draw


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m secagg.demo", description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=300)
    ap.add_argument("--dim", type=int, default=1000)
    ap.add_argument("--bits", type=int, default=32)
    ap.add_argument("--dropout", type=float, default=0.03, help="drop probability per phase")
    ap.add_argument("--threat-model", default="active", choices=["semi_honest", "active"])
    ap.add_argument("--protocol-seed", help="seed the session id, keys, self-mask seeds and Shamir coefficients "
                    "(reproducible runs; default: OS entropy)")
    ap.add_argument("--seed", type=int, help="seed of the inputs and the drops", default=1)
    args = ap.parse_args(argv)

    rng = SeededRandom(b"secagg.demo/%d" % args.seed)  # the simulated inputs and drops
    protocol = protocol_randomness(args.protocol_seed)
    session_id = protocol.child("session-id").bytes(16)
    cfg = SecAggConfig(session_id, args.devices, args.dim, args.bits, threat_model=args.threat_model)
    inputs = {p: uint64s(rng, args.dim) % np.uint64(1000) for p in range(1, args.devices + 1)}
    drops: dict[Phase, set[int]] = {Phase.ADVERTISE_KEYS: _advertise_drops(args.devices, rng, args.dropout)}
    later = _drops_within_tolerance(cfg, rng, args.dropout, drops[Phase.ADVERTISE_KEYS])

    def later_drops(graph: NeighbourGraph) -> dict[Phase, set[int]]:
        chosen = later(graph)
        drops.update(chosen)  # for the table below
        return chosen

    graph = "complete" if cfg.uses_complete_graph else f"sparse (Harary, degree {cfg.resolved_degree})"
    print(f"Secure aggregation: {args.devices} devices, {args.dim} dims, {args.bits}-bit ring, {graph}, "
          f"{args.threat_model.replace('_', '-')} model, threshold {cfg.share_threshold} per neighbourhood")
    start = time.perf_counter()
    report = run_session(cfg, inputs, drops, time.perf_counter, randomness=protocol, later_drops=later_drops)
    total = time.perf_counter() - start

    print(f"{'phase':<20}{'dropped':>9}{'clients s':>12}{'server s':>11}")
    for phase in PROTOCOL_PHASES:
        if phase is Phase.CONSISTENCY_CHECK and not cfg.active:
            continue
        print(f"{phase.label:<20}{len(drops.get(phase, ())):>9}{report.client_s[phase.label]:>12.3f}"
              f"{report.server_s[phase.label]:>11.3f}")
    if report.abort is not None:
        print(f"ABORTED: {report.abort}")
        return 1
    assert report.result is not None  # a session that did not abort reached DONE, which sets the result
    want = expected_sum(inputs, report.sent_input, args.bits)
    ok = np.array_equal(report.result.vector, want)
    print(f"contributors: {len(report.result.contributors)} of {args.devices}; "
          f"upload per device: {np.mean(list(report.upload_bytes.values())) / 1024:.1f} KiB; total {total:.2f} s")
    print(f"sum matched the true sum of the contributors' inputs: {'YES' if ok else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
