"""A client's masked vector is statistically uniform even when its input is constant.

Chi-square goodness of fit against the uniform distribution on Z/2^8 with 65,536 entries. The masks
come from fresh os.urandom keys, so the test is random: at significance 1e-6 a correct implementation
fails about once in a million runs. A constant vector (the control) fails overwhelmingly.
"""

from __future__ import annotations

import os

import numpy as np
from scipy.stats import chisquare

from secagg import ClientSession, SecAggConfig, ServerSession, encoding
from secagg.messages import MaskedInput, decode

ALPHA = 1e-6


def _masked_vector(bits: int, dim: int, value: int) -> np.ndarray:
    cfg = SecAggConfig(os.urandom(16), 3, dim, bits)
    clients = {p: ClientSession(cfg, p, np.full(dim, value, dtype=np.uint64)) for p in (1, 2, 3)}
    server = ServerSession(cfg)
    outgoing = {p: c.start() for p, c in clients.items()}
    for _ in range(2):
        for p, m in outgoing.items():
            server.receive(p, m)
        outgoing = {p: clients[p].receive(m) for p, m in server.close_phase().items()}
    msg = decode(outgoing[1])
    assert isinstance(msg, MaskedInput)
    return encoding.unpack(msg.packed, dim, bits)


def _p_value(values: np.ndarray, categories: int) -> float:
    counts = np.bincount(values.astype(np.int64), minlength=categories)
    return float(chisquare(counts).pvalue)


def test_masked_vector_is_uniform_for_constant_input():
    vec = _masked_vector(8, 65_536, 7)
    assert _p_value(vec, 256) > ALPHA
    assert _p_value(np.full(65_536, 7), 256) < ALPHA  # control: the input itself is far from uniform


def test_masked_vector_top_byte_is_uniform_at_wide_bit_widths():
    vec = _masked_vector(44, 65_536, 0)
    assert _p_value(vec >> np.uint64(36), 256) > ALPHA
    assert _p_value(vec & np.uint64(0xFF), 256) > ALPHA
