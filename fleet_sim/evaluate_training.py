"""In-process evaluation of the training kind (`python -m fleet_sim.evaluate_training [--quick]`, prints JSON).

Runs three scenarios with exact sums (`queries.local_run.run_locally`): logistic regression
on breast cancer over 50 label-skewed devices vs scikit-learn; softmax regression on digits over 100
label-skewed devices vs the same model trained centrally with the same epochs budget (FedSGD, and FedAvg
with 2 local epochs under the FedAdam server optimiser — its tuned default — and under plain server SGD); the frecency example with Rprop sign votes over 300 simulated devices (curve of
loss, mean rank and characters typed). The figures in docs/training.md and docs/frecency.md come from
here.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from queries.local_run import run_locally
from queries.registry import get_kind
from fleet_sim import urlbar_sim
from queries.training import TrainedModel, frecency
from queries.training.client import WhiteBoxObjective, local_update
from queries.training.models import build_model


def _skewed(y: np.ndarray, n: int, rng: np.random.Generator) -> list[np.ndarray]:
    return np.array_split(np.argsort(y + rng.uniform(0, 0.8, size=len(y))), n)


def breast_cancer() -> dict[str, Any]:
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import train_test_split

    X, y = load_breast_cancer(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)
    mean, std = Xtr.mean(axis=0), Xtr.std(axis=0)
    Ztr, Zte = (Xtr - mean) / std, (Xte - mean) / std
    devices = [[{"x": Ztr[i].tolist(), "y": int(ytr[i])} for i in c] for c in _skewed(ytr * 1.0, 50, np.random.default_rng(0))]
    raw = {"model": {"name": "logistic", "n_features": 30, "l2": 1.0 / len(ytr)}, "rounds": 100,
           "client": {"epochs": 1, "batch_size": 0, "lr": 1.0}, "clip_norm": 10.0, "eval_every": 25, "holdout_fraction": 0.0}
    result, rounds = run_locally(get_kind("training"), raw, devices)
    fed = roc_auc_score(yte, TrainedModel(result).scores(Zte))
    ref = roc_auc_score(yte, LogisticRegression(max_iter=5000).fit(Ztr, ytr).decision_function(Zte))
    return {"devices": 50, "server_rounds": len(rounds), "training_rounds": result["rounds"], "auc_federated": fed, "auc_sklearn": ref}


def digits(rounds: int, epochs: int, batch: int, lr: float, server: dict[str, Any]) -> dict[str, Any]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X / 16.0, y, test_size=0.3, random_state=0, stratify=y)
    rng = np.random.default_rng(1)
    devices = [[{"x": Xtr[i].tolist(), "y": int(ytr[i])} for i in c] for c in _skewed(ytr * 1.0, 100, rng)]
    spec = {"name": "softmax", "n_features": 64, "n_classes": 10}
    raw = {"model": spec, "rounds": rounds, "client": {"epochs": epochs, "batch_size": batch, "lr": lr},
           "server_optimizer": server, "clip_norm": 50.0, "eval_every": 0, "holdout_fraction": 0.0}
    result, _ = run_locally(get_kind("training"), raw, devices)
    model = build_model(spec)
    pooled = WhiteBoxObjective(model, [r for d in devices for r in d])
    theta = local_update(pooled, np.zeros(model.n_params), rounds * epochs, batch, lr, rng)
    return {"rounds": rounds, "epochs": epochs, "batch_size": batch, "client_lr": lr, "server": server,
            "accuracy_federated": float(np.mean(TrainedModel(result).predict(Xte) == yte)),
            "accuracy_central_same_epochs": float(np.mean(model.predict(theta, Xte) == yte))}


def frecency_curve(rounds: int, n_devices: int = 300, interactions: int = 10) -> dict[str, Any]:
    devices = urlbar_sim.make_population(np.random.default_rng(1), n_devices, n_interactions=interactions)
    validation = [r for d in urlbar_sim.make_population(np.random.default_rng(99), 100, n_interactions=20) for r in d]
    result, _ = run_locally(get_kind("training"), frecency.example_params(rounds=rounds, eval_every=5), devices)
    return {
        "devices": n_devices,
        "history": result["history"],
        "weights": dict(zip(frecency.PARAM_NAMES, np.round(result["weights"], 3).tolist())),
        "validation_handcrafted": urlbar_sim.evaluate(frecency.HANDCRAFTED, validation),
        "validation_learned": urlbar_sim.evaluate(result["weights"], validation),
        "validation_true_weights": urlbar_sim.evaluate(urlbar_sim.TRUE_WEIGHTS, validation),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer frecency rounds")
    args = ap.parse_args(argv)
    t0 = time.time()
    out: dict[str, Any] = {
        "breast_cancer": breast_cancer(),
        "digits_fedsgd": digits(100, 1, 0, 1.0, {"name": "fedavg", "lr": 1.0}),
        "digits_fedavg": digits(30, 2, 10, 0.1, {"name": "adam"}),
        "digits_fedavg_plain_server_sgd": digits(30, 2, 10, 0.1, {"name": "fedavg", "lr": 3.0}),
        "frecency": frecency_curve(10 if args.quick else 40),
    }
    out["seconds"] = round(time.time() - t0, 1)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
