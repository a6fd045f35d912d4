"""The single place where a device adds its share of distributed DP noise before masking."""

from __future__ import annotations

import numpy as np

from queries.envelope import NoiseBlock


class NoiseUnavailableError(RuntimeError):
    """The assignment asks for noise this build cannot sample; the device must not contribute."""


def add_noise(vec: np.ndarray, noise: NoiseBlock | None) -> np.ndarray:
    """`vec` plus an integer noise share drawn with a generator seeded from os.urandom (per contribution)."""
    if noise is None or noise.mechanism == "none":
        return vec
    try:
        from queries.dp import device_rng, sample_noise
    except ImportError:
        raise NoiseUnavailableError(f"noise mechanism {noise.mechanism!r} requested but queries.dp is missing") from None
    share = np.asarray(sample_noise(noise.mechanism, noise.scale, vec.shape[0], device_rng()), dtype=np.int64)
    return vec.astype(np.int64) + share
