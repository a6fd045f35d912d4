"""The README's DP pipeline in process: `examples/breast_cancer_stats.json` over a `breast_cancer_patient` fleet
(one training row per device), its answer merged into `examples/breast_cancer_train_dp.json` as `params.scaling`,
then the training — both with the server's calibration, every device's own noise share and t_min = the specs'
`cohort.min_clients` (`queries.local_run.run_query`). Used by tests/queries/training/test_dp_training.py and
`make bench` (scripts/bench_dp_training.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fleet_sim.scenarios import generate
from fleet_sim.scenarios.datasets import breast_cancer_split, breast_cancer_train_size
from queries.local_run import run_query
from queries.registry import get_kind
from queries.training import TrainedModel
from secagg.randomness import SeededRandom

ROOT = Path(__file__).resolve().parents[1]
STATS_SPEC = ROOT / "examples" / "breast_cancer_stats.json"
TRAIN_SPEC = ROOT / "examples" / "breast_cancer_train_dp.json"


@dataclass(frozen=True)
class PipelineRun:
    auc: float
    """Test-split ROC AUC of the released weights."""
    result: dict[str, Any]
    """The training query's result."""
    stats: dict[str, Any]
    """The feature_stats query's result."""


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`base` with `over`'s keys replaced, recursing into dicts present in both."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merged(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return out


def fleet() -> list[dict[str, list[Any]]]:
    """The README's training fleet: one device per training row."""
    return [generate("breast_cancer_patient", 7, i) for i in range(breast_cancer_train_size())]


def run_pipeline(seed: int, train_over: dict[str, Any] | None = None,
                 devices: list[dict[str, list[Any]]] | None = None) -> PipelineRun:
    """One run of both queries with noise seeded by `seed`; `train_over` changes the training params."""
    devices = devices if devices is not None else fleet()
    stats_spec = json.loads(STATS_SPEC.read_text())
    train_spec = json.loads(TRAIN_SPEC.read_text())
    stats = run_query(get_kind("feature_stats"), stats_spec["params"], [d["features"] for d in devices],
                      privacy=stats_spec["privacy"], t_min=stats_spec["cohort"]["min_clients"],
                      rng=np.random.default_rng(10_000 + seed), noise_source=SeededRandom(b"readme-stats-%d" % seed))
    # as `fa … --format json` writes the answer: sorted keys
    answer = json.loads(json.dumps({"id": "…", "kind": "feature_stats", "result": stats.result}, sort_keys=True))
    params = merged(dict(train_spec["params"], scaling=answer), train_over or {})
    run = run_query(get_kind("training"), params, [d["examples"] for d in devices], privacy=train_spec["privacy"],
                    t_min=train_spec["cohort"]["min_clients"], rng=np.random.default_rng(seed),
                    noise_source=SeededRandom(b"readme-train-%d" % seed))
    sp = breast_cancer_split()
    from sklearn.metrics import roc_auc_score

    auc = float(roc_auc_score(sp.y_test, TrainedModel(run.result).scores(sp.X_test)))
    return PipelineRun(auc, run.result, stats.result)
