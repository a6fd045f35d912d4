"""Per-round Bernoulli sampling of devices (`RoundPlan.sample_rate`, e.g. TrieHH's q) with coins that do not
change: a device's coin for a round is HMAC-SHA256(round secret, device id) read as a number in [0, 1) and
compared with the rate.

A coin drawn afresh per process would be re-flipped after every restart (and by every server process), so
a device refused by one coin could be admitted by the next: the true sampling rate would exceed the rate the
privacy guarantee was calibrated for. The round secret (32 bytes from the OS, stored with the round) makes
each coin a fixed, unpredictable function of (round, device): the same in every process and after any
restart, independent across devices and rounds, and unknown to devices.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

SECRET_BYTES = 32


def new_secret() -> bytes:
    return secrets.token_bytes(SECRET_BYTES)


def coin(secret: bytes, device_id: str) -> float:
    """The device's uniform draw in [0, 1) for the round keyed by `secret` (53 bits of the HMAC)."""
    digest = hmac.new(secret, device_id.encode("utf-8"), hashlib.sha256).digest()
    return (int.from_bytes(digest[:8], "big") >> 11) / float(1 << 53)


def sampled(secret: bytes, device_id: str, rate: float) -> bool:
    """Whether the device takes part in the round: its coin is below the sample rate."""
    return rate >= 1.0 or coin(secret, device_id) < rate
