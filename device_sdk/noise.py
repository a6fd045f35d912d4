"""The single place where a device adds its share of distributed DP noise before masking.

The device multiplies the kind's integer vector by the round's `encoding_scale` s (the server divides the
aggregate by s before decoding) and adds an integer share drawn from the contribution's noise source
(`device_sdk.randomness`; OS entropy unless a seeded source is injected).
"""

from __future__ import annotations

import numpy as np

from queries.dp import sample_noise
from queries.envelope import NoiseBlock
from secagg.randomness import ByteSource, OsRandom


def add_noise(vec: np.ndarray, noise: NoiseBlock | None, rng: ByteSource | None = None) -> np.ndarray:
    """s·`vec` plus an integer noise share drawn from `rng` (OS entropy by default)."""
    if noise is None or noise.mechanism == "none":
        return vec
    share = np.asarray(sample_noise(noise.mechanism, noise.scale, vec.shape[0], rng or OsRandom()), dtype=np.int64)
    return vec.astype(np.int64) * int(noise.encoding_scale) + share
