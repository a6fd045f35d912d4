"""The single place where a device adds its share of distributed DP noise before masking.

The device multiplies the kind's integer vector by the round's `encoding_scale` s (the server divides the
aggregate by s before decoding) and adds an integer share drawn with a generator seeded from os.urandom.
"""

from __future__ import annotations

import numpy as np

from queries.dp import device_rng, sample_noise
from queries.envelope import NoiseBlock


def add_noise(vec: np.ndarray, noise: NoiseBlock | None) -> np.ndarray:
    """s·`vec` plus an integer noise share (fresh os.urandom-seeded generator per contribution)."""
    if noise is None or noise.mechanism == "none":
        return vec
    share = np.asarray(sample_noise(noise.mechanism, noise.scale, vec.shape[0], device_rng()), dtype=np.int64)
    return vec.astype(np.int64) * int(noise.encoding_scale) + share
