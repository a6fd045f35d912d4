"""`make bench` section "dp_training": the README's DP pipeline and the divergence detector, in process.

README pipeline: `examples/breast_cancer_stats.json` then `examples/breast_cancer_train_dp.json` (both ε = 2, δ = 1e-6,
within the production profile's caps) over 398 devices holding one training row each (devstack/readme_pipeline.py:
the server's calibration, every device's own noise share, t_min = cohort.min_clients), 20 noise seeds: the test ROC
AUC of each run, its stop reason, and the scaling statistics' error (median over the features of |mean error| /
the feature's std) — against scikit-learn's LogisticRegression on the pooled, exactly scaled rows.

Divergence (the same pipeline, training params changed): the README config is the false-alarm check (a run of it
flagged "diverged" is a false alarm; every seed above counts); `diverging` raises the learning rates to client 30
and server 100 (the loss climbs to its cap within ten rounds) and counts the seeds flagged; `overshooting` (server
lr 300) reports how often it is flagged together with how often its final model is truly worse than the starting
one (the true capped eval loss over every device's rows, computed here from the released weights).

Prints one JSON object.
"""

from __future__ import annotations

import json
import math
import sys
import time

import numpy as np

from devstack.readme_pipeline import fleet, run_pipeline
from fleet_sim.scenarios.datasets import breast_cancer_split
from queries.training import TrainedModel

SEEDS = 20
DIVERGING = {"client": {"lr": 30.0}, "server_optimizer": {"lr": 100.0}}
OVERSHOOTING = {"server_optimizer": {"lr": 300.0}}
LOSS_CAP = 10.0


def _true_loss(result: dict, weights: list[float]) -> float:
    """The capped log loss of `weights` over the training rows (each device holds one): what eval_loss estimates."""
    sp = breast_cancer_split()
    p = np.clip(TrainedModel(dict(result, weights=weights)).scores(sp.X_train), 1e-300, 1 - 1e-16)
    y = sp.y_train
    return float(np.minimum(-(y * np.log(p) + (1 - y) * np.log1p(-p)), LOSS_CAP).mean())


def _central_auc() -> float:
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    sp = breast_cancer_split()
    mean, std = sp.X_train.mean(axis=0), sp.X_train.std(axis=0)
    model = LogisticRegression(max_iter=5000).fit((sp.X_train - mean) / std, sp.y_train)
    return float(roc_auc_score(sp.y_test, model.decision_function((sp.X_test - mean) / std)))


def main() -> None:
    seeds = int(sys.argv[1]) if len(sys.argv) > 1 else SEEDS
    started = time.perf_counter()
    devices = fleet()
    sp = breast_cancer_split()
    truth_mean, truth_std = sp.X_train.mean(axis=0), sp.X_train.std(axis=0)
    runs = []
    for seed in range(seeds):
        run = run_pipeline(seed, devices=devices)
        feats = run.stats["features"]
        errs = [abs(feats[n]["mean"] - m) / s for n, m, s in zip(sp.feature_names, truth_mean, truth_std) if n in feats]
        runs.append({"seed": seed, "auc": round(run.auc, 4), "stop_reason": run.result["stop_reason"],
                     "suppressed": len(run.stats["suppressed"]),
                     "mean_error_in_stds": round(float(np.median(errs)), 3) if errs else None})
        print(f"[dp_training] readme seed {seed}: AUC {run.auc:.4f}", file=sys.stderr, flush=True)
    aucs = [r["auc"] for r in runs]
    flagged = {}
    for name, over in (("diverging", DIVERGING), ("overshooting", OVERSHOOTING)):
        hits, worse, worse_hits = 0, 0, 0
        for seed in range(seeds):
            run = run_pipeline(seed, train_over=over, devices=devices)
            hit = run.result["stop_reason"] == "diverged"
            bad = _true_loss(run.result, run.result["last_weights"]) > math.log(2)  # the starting model's loss
            hits += hit
            worse += bad
            worse_hits += hit and bad
        flagged[name] = {"params": over, "seeds": seeds, "flagged_diverged": hits, "hit_rate": round(hits / seeds, 3),
                         "truly_worse_than_start": worse, "truly_worse_and_flagged": worse_hits}
        print(f"[dp_training] {name}: {hits}/{seeds} flagged", file=sys.stderr, flush=True)
    out = {
        "readme_pipeline": {"devices": len(devices), "epsilon": 2.0, "delta": 1e-6, "seeds": seeds,
                            "auc_min": min(aucs), "auc_median": float(np.median(aucs)), "auc_max": max(aucs),
                            "central_auc": round(_central_auc(), 4),
                            "completed": sum(r["stop_reason"] == "completed" for r in runs), "runs": runs},
        "divergence": {"false_alarms_readme_config": sum(r["stop_reason"] == "diverged" for r in runs),
                       "readme_runs": seeds, **flagged},
        "seconds": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
