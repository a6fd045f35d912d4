"""SecAggConfig: derived graph, degree and thresholds; refusal of unusable parameters; JSON round trip."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from secagg import ClientSession, ConfigError, SecAggConfig
from secagg.graph import COMPLETE_MAX

SID = bytes(16)


def test_small_cohorts_use_the_complete_graph_with_majority_thresholds():
    cfg = SecAggConfig(SID, 50, 10, 16)
    assert cfg.uses_complete_graph and cfg.neighbourhood_size == 50
    assert cfg.share_threshold == 26
    assert SecAggConfig(SID, 50, 10, 16, threat_model="active").share_threshold == 34


@pytest.mark.parametrize("n", [200, 500, 1000, 5000])
def test_large_cohorts_use_a_logarithmic_degree(n):
    cfg = SecAggConfig(SID, n, 10, 32)
    assert n > COMPLETE_MAX and not cfg.uses_complete_graph
    assert cfg.resolved_degree % 2 == 0
    assert cfg.resolved_degree <= 2 * math.ceil(3 * math.log2(n))
    assert cfg.share_threshold == cfg.neighbourhood_size // 2 + 1


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"bits": 0}, "bits"),
        ({"bits": 63}, "bits"),
        ({"n": 1}, "n"),
        ({"dim": 0}, "dim"),
        ({"threshold": 5}, "threshold"),  # not above half of n = 10
        ({"threshold": 11}, "threshold"),
        ({"graph": "ring"}, "graph"),
        ({"threat_model": "paranoid"}, "threat_model"),
        ({"degree": 3, "graph": "sparse"}, "degree"),
        ({"max_input": 1 << 13, "bits": 16}, "bits"),  # 10 × 2^13 wraps modulo 2^16
    ],
)
def test_unusable_parameters_are_refused_naming_the_field(kwargs, field):
    base = {"session_id": SID, "n": 10, "dim": 4, "bits": 16} | kwargs
    with pytest.raises(ConfigError, match=field):
        SecAggConfig(**base)


def test_session_id_must_be_16_bytes():
    with pytest.raises(ConfigError, match="session_id"):
        SecAggConfig(b"short", 10, 4, 16)


def test_dict_round_trip_and_bad_dicts():
    cfg = SecAggConfig(os.urandom(16), 300, 7, 40, threat_model="active", max_input=100)
    assert SecAggConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError):
        SecAggConfig.from_dict({"session_id": "zz", "n": 3})
    with pytest.raises(ConfigError):
        SecAggConfig.from_dict({"n": 3})


def test_client_refuses_inputs_outside_the_ring_and_wrong_length():
    cfg = SecAggConfig(SID, 3, 4, 8)
    with pytest.raises(ConfigError, match="input_vector"):
        ClientSession(cfg, 1, np.array([0, 0, 0, 256], dtype=np.uint64))
    with pytest.raises(ConfigError, match="input_vector"):
        ClientSession(cfg, 1, np.zeros(5, dtype=np.uint64))
    with pytest.raises(ConfigError, match="party_id"):
        ClientSession(cfg, 4, np.zeros(4, dtype=np.uint64))
    with pytest.raises(ConfigError, match="identity_key"):
        ClientSession(SecAggConfig(SID, 3, 4, 8, threat_model="active"), 1, np.zeros(4, dtype=np.uint64))
