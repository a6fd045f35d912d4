"""SecAggConfig: derived graph, degree and thresholds (from `secagg.floor.plan`); refusal of unusable parameters; JSON
round trip."""

from __future__ import annotations

import os

import numpy as np
import pytest

from secagg import ClientSession, ConfigError, SecAggConfig, floor

SID = bytes(16)


def test_small_cohorts_use_the_complete_graph_with_majority_thresholds():
    """Semi-honest: ⌊m/2⌋ + 1. Active: the floor's exact threshold on the complete graph, ⌊(m + ⌊n/3⌋)/2⌋ + 1 (no
    honest party can see 2t − m corrupt members among n/3)."""
    cfg = SecAggConfig(SID, 50, 10, 16)
    assert cfg.uses_complete_graph and cfg.neighbourhood_size == 50
    assert cfg.share_threshold == 26
    assert SecAggConfig(SID, 50, 10, 16, threat_model="active").share_threshold == (50 + 16) // 2 + 1 == 34


@pytest.mark.parametrize("n", [2, 3, 10, 100, 200, 500, 1000, 5000])
def test_the_default_degree_and_threshold_are_the_server_s_plan(n):
    """The degree is `floor.plan(n)`'s: at or above the device's floor (or the complete graph), even when sparse; the
    active threshold is the floor's at that degree and, on a sparse graph, survives the default dropout (so a device
    with the default assumptions accepts the default config)."""
    plan = floor.plan(n)
    for threat in ("semi_honest", "active"):
        cfg = SecAggConfig(SID, n, 10, 32, threat_model=threat)
        assert cfg.resolved_degree == plan.degree and cfg.uses_complete_graph == (plan.degree == n - 1)
        m = cfg.neighbourhood_size
        assert cfg.share_threshold == (plan.threshold if threat == "active" else m // 2 + 1)
    active = SecAggConfig(SID, n, 10, 32, threat_model="active")
    assert active.share_threshold == floor.threshold_floor(n, active.resolved_degree)
    floor.check(n, active.resolved_degree, active.share_threshold)  # the default assumptions accept it
    if not active.uses_complete_graph:
        assert active.resolved_degree % 2 == 0 and active.resolved_degree >= floor.safety_floor(n).degree
        assert active.share_threshold <= floor.live_threshold(n, active.resolved_degree, floor.DEFAULT_DROPOUT_FRACTION)


def test_large_cohorts_use_a_sparse_graph():
    for n in (1000, 5000, 100_000):
        cfg = SecAggConfig(SID, n, 10, 32, threat_model="active")
        assert not cfg.uses_complete_graph and cfg.resolved_degree < n - 1


def test_an_explicit_degree_or_graph_overrides_the_plan():
    assert SecAggConfig(SID, 300, 4, 16, graph="sparse", degree=40).resolved_degree == 40
    assert SecAggConfig(SID, 300, 4, 16, graph="complete").uses_complete_graph
    assert SecAggConfig(SID, 30, 4, 16, degree=40).resolved_degree == 29  # capped at n − 1: the complete graph
    cfg = SecAggConfig(SID, 300, 4, 16, graph="sparse", degree=40, threat_model="active")
    assert cfg.share_threshold == (floor.threshold_floor(300, 40) or 41)


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
