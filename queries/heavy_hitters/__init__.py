"""Heavy hitters over open sets: TrieHH and hardened TrieHH as the `heavy_hitters` query kind.

`kind.py` holds the query kind (params, device-side votes, server-side decode), `calibration.py` the
TrieHH privacy formulas, `encoding.py` the string rules and vector layout, `population.py` synthetic
populations, and `evaluate.py` the in-process evaluation tool (`python -m queries.heavy_hitters.evaluate`).
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
