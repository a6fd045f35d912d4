"""Heavy hitters over open sets: TrieHH and hardened TrieHH as the `heavy_hitters` query kind.

`kind.py` holds the query kind (params, device-side votes, server-side decode), `calibration.py` the
TrieHH privacy formulas and `encoding.py` the string rules and vector layout. Synthetic populations and the
in-process evaluation tool live with the simulator (`fleet_sim.populations`, `python -m fleet_sim.evaluate_heavy_hitters`).
`queries.registry` lists the kind.
"""

from queries.heavy_hitters.calibration import CalibrationError, TrieHHCalibration, calibrate_triehh
from queries.heavy_hitters.encoding import DEFAULT_ALPHABET
from queries.heavy_hitters.kind import HeavyHittersKind, HeavyHittersParams, HeavyHittersState

__all__ = [
    "DEFAULT_ALPHABET",
    "CalibrationError",
    "HeavyHittersKind",
    "HeavyHittersParams",
    "HeavyHittersState",
    "TrieHHCalibration",
    "calibrate_triehh",
]
