"""Acceptance: the `training` kind end to end over HTTP with a real server process.

One server for the module (SQLite), fleets started per scenario:
- breast cancer over 50 label-skewed devices: a `feature_stats` query scales the features, logistic
  regression by FedSGD → test ROC AUC within 0.01 of scikit-learn's LogisticRegression on the same split;
- the README's specs on this 50-device fleet (examples/breast_cancer_stats.json without noise — at 8 rows per device a
  DP feature_stats is noise; the README runs both under DP over 398 one-row devices, tests/e2e/test_readme.py — then
  breast_cancer_train_dp.json with the stats answer as scaling at ε = 8, δ = 1e-5 with the DP defaults, uniform
  weighting and adaptive clipping) → within 0.03, every evaluation with its interval;
- a deliberately diverging configuration (client lr 1000, clip 1e6) → status failed, stop_reason
  "diverged", the last good weights readable;
- an analyst-fixed noise multiplier → the server stops before the round that would exceed ε;
- SIGKILL mid-training → the query resumes from the last finished round and completes;
- frecency (Rprop on secure sign votes) over 300 devices: the eval loss falls and the mean rank improves
  on the handcrafted weights (also on fresh simulated interactions).
Figures are printed (run with -s) and recorded in docs/training.md and docs/frecency.md.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from analyst_client.cli import AnalystClient, format_result
from fleet_sim.scenarios import generate
from fleet_sim.scenarios.datasets import breast_cancer_split
from fleet_sim import urlbar_sim
from queries.training import TrainedModel, frecency
from tests.e2e.harness import RESTART_ENV, Fleet, Server, audit_clean, fresh_database

pytestmark = pytest.mark.e2e
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

N_BC = 50
COHORT = {"min_clients": 45, "max_clients": N_BC, "phase_timeout_s": 5}


def _auc(y: np.ndarray, s: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, s))


def central_auc() -> float:
    """sklearn LogisticRegression on the same (standardised) training split, test ROC AUC."""
    from sklearn.linear_model import LogisticRegression

    sp = breast_cancer_split()
    mean, std = sp.X_train.mean(axis=0), sp.X_train.std(axis=0)
    clf = LogisticRegression(max_iter=5000).fit((sp.X_train - mean) / std, sp.y_train)
    return _auc(sp.y_test, clf.decision_function((sp.X_test - mean) / std))


def training_spec(scaling: dict[str, Any], rounds: int = 10, dp: bool = False, **extra: Any) -> dict[str, Any]:
    sp = breast_cancer_split()
    params: dict[str, Any] = {
        "model": {"name": "logistic", "n_features": len(sp.feature_names), "l2": 1.0 / len(sp.y_train)},
        "rounds": rounds,
        "features": sp.feature_names,
        "scaling": scaling,
        "client": {"epochs": 1, "batch_size": 0, "lr": 1.0},
        "server_optimizer": {"name": "fedavg", "lr": 3.0},
        "clip_norm": 10.0,
        "eval_every": rounds,
        "holdout_fraction": 0.0,
    }
    # no proofs: as the README's breast-cancer examples (a 30-weight update is ~2,000 bits, about a second of proving
    # per device and round for this one fa-sim process); the proofs of clipped updates are tested over HTTP in
    # tests/analytics_server/test_training_proofs.py
    spec: dict[str, Any] = {"kind": "training", "name": "bc logistic", "source": "examples", "params": params,
                            "cohort": COHORT, "privacy": {"validation": "none"}}
    if dp:
        params |= {"weighting": "uniform", "clip_norm": 1.0, "eval_every": 0, "server_optimizer": {"name": "fedavg", "lr": 10.0}}
        spec["privacy"] = {"mechanism": "discrete_gaussian", "epsilon": 8.0, "delta": 1e-5, "validation": "none"}
    params.update(extra)
    return spec


def auc_of(result: dict[str, Any]) -> float:
    sp = breast_cancer_split()
    return _auc(sp.y_test, TrainedModel(result).scores(sp.X_test))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("training")
    url = f"sqlite+aiosqlite:///{tmp / 'fa.db'}"
    fresh_database(url)
    # several DP queries on one source: a budget ledger large enough for all of them (the ledger is not under test);
    # short leases for the SIGKILL test
    env = {"FA_BUDGET_EPSILON": "1000", "FA_BUDGET_DELTA": "0.01", **RESTART_ENV}
    srv = Server(url, tmp / "server.log", env=env).start()
    yield srv
    srv.stop()
    assert not srv.log_has_tracebacks(), (tmp / "server.log").read_text()[-5000:]


@pytest.fixture(scope="module")
def admin(server: Server) -> AnalystClient:
    return AnalystClient(server.url, server.token("admin"))


@pytest.fixture(scope="module")
def bc_fleet(server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    fleet = Fleet(server.url, N_BC, tmp_path_factory.mktemp("bc"), scenario="breast_cancer_train", seed=7)
    yield fleet
    fleet.stop()


@pytest.fixture(scope="module")
def scaling(admin: AnalystClient, bc_fleet: Fleet) -> dict[str, Any]:
    """The whole answer of the README's feature_stats query (what `fa submit … --format json` prints)."""
    spec = json.loads((EXAMPLES / "breast_cancer_stats.json").read_text())
    spec["params"].pop("max_examples_per_device")  # the bound chosen from the data: 8 rows
    spec |= {"privacy": {"mechanism": "none", "validation": "none"}, "cohort": COHORT}
    qid = admin.submit(spec)["id"]
    final = admin.wait(qid, timeout_s=120)
    assert final["status"] == "succeeded", final
    answer = json.loads(format_result(admin.result(qid), "json"))  # as `fa … --format json` writes it: sorted keys
    res = answer["result"]
    sp = breast_cancer_split()
    assert np.allclose([res["features"][n]["mean"] for n in sp.feature_names], sp.X_train.mean(axis=0), rtol=1e-6)
    assert res["contribution_bound"]["chosen_from_data"] and res["contribution_bound"]["rows_clipped"] == 0
    return answer


def _run(admin: AnalystClient, spec: dict[str, Any], timeout_s: float = 240) -> dict[str, Any]:
    t0 = time.monotonic()
    qid = admin.submit(spec)["id"]
    final = admin.wait(qid, timeout_s=timeout_s)
    assert final["status"] == "succeeded", final
    out = admin.result(qid)
    out["seconds"] = time.monotonic() - t0
    return out


def test_logistic_breast_cancer_matches_sklearn(admin: AnalystClient, scaling: dict[str, Any]) -> None:
    out = _run(admin, training_spec(scaling))
    res = out["result"]
    fed, ref = auc_of(res), central_auc()
    print(json.dumps({"auc_federated": fed, "auc_sklearn": ref, "rounds": res["rounds"],
                      "server_rounds": res["server_rounds"], "seconds": round(out["seconds"], 1),
                      "history": res["history"]}))
    assert res["stop_reason"] == "completed" and res["rounds"] == 10
    assert res["clients"] >= COHORT["min_clients"]
    assert abs(fed - ref) <= 0.01, (fed, ref)
    assert res["history"][-1]["eval_loss"] < res["history"][0]["eval_loss"]


def test_readme_dp_training_spec_on_50_devices(admin: AnalystClient, scaling: dict[str, Any]) -> None:
    spec = json.loads((EXAMPLES / "breast_cancer_train_dp.json").read_text())
    spec["params"]["scaling"] = scaling  # the README's one-line merge
    spec["privacy"] |= {"epsilon": 8.0, "delta": 1e-5}  # 50 devices of 8 rows need more ε than the README's 398 of one
    spec["cohort"] = COHORT
    out = _run(admin, spec)
    res, priv = out["result"], out["privacy"]
    fed, ref = auc_of(res), central_auc()
    print(json.dumps({"dp_auc_federated": fed, "auc_sklearn": ref, "rounds": res["rounds"], "clip_norms": res["clip_norms"],
                      "epsilon_spent": priv["epsilon_spent"], "noise_multiplier": priv["noise_multiplier"],
                      "history": res["history"], "seconds": round(out["seconds"], 1)}))
    assert priv["mechanism"] == "discrete_gaussian" and priv["epsilon_spent"] <= 8.0 * (1 + 1e-9)
    assert res["rounds"] == 10 and res["stop_reason"] == "completed" and len(res["clip_norms"]) == 10
    assert abs(fed - ref) <= 0.03, (fed, ref)
    for i, entry in enumerate(res["history"]):  # every noisy evaluation carries its interval
        ci = out["uncertainty"][f"/history/{i}/accuracy"]["ci95"]
        assert 0.0 <= ci[0] <= entry["accuracy"] <= ci[1] <= 1.0


def test_diverging_configuration_ends_as_diverged(admin: AnalystClient, scaling: dict[str, Any]) -> None:
    spec = training_spec(scaling, rounds=4, eval_every=1, clip_norm=1e6, client={"epochs": 1, "batch_size": 0, "lr": 1000.0},
                         server_optimizer={"name": "fedavg", "lr": 10.0})
    qid = admin.submit(spec)["id"]
    final = admin.wait(qid, timeout_s=120)
    assert final["status"] == "failed" and "diverged" in final["error"], final
    out = admin.result(qid)  # the result stays readable
    res = out["result"]
    assert out["status"] == "failed" and res["stop_reason"] == "diverged" and res["divergence"]["round"] >= 1
    assert res["best_round"] < res["divergence"]["round"]
    assert all(np.isfinite(res["weights"])) and auc_of(res) > 0.8  # the last good weights
    assert any("diverged" in w["message"] for w in out["warnings"])


def test_fixed_noise_multiplier_stops_at_budget(admin: AnalystClient, scaling: dict[str, Any]) -> None:
    from queries import dp

    spec = training_spec(scaling, rounds=10, dp=True)
    spec["privacy"]["noise_multiplier"] = 1.0
    affordable = dp.rounds_affordable(dp.fixed_calibration("discrete_gaussian", 8.0, 1e-5, 1.0, 10, COHORT["min_clients"]))
    assert 1 <= affordable < 10
    out = _run(admin, spec)
    res, priv = out["result"], out["privacy"]
    assert res["stopped"] == "privacy budget exhausted"
    assert res["rounds"] == affordable  # the round that would exceed ε was never run nor applied
    assert priv["rounds"] == affordable and priv["epsilon_spent"] <= 8.0


def test_sigkill_mid_training_resumes(server: Server, admin: AnalystClient, scaling: dict[str, Any]) -> None:
    qid = admin.submit(training_spec(scaling, rounds=8, eval_every=4))["id"]
    deadline = time.monotonic() + 120
    while True:  # kill inside a cohort of a later round (server round ≥ 3 = after a few training rounds)
        st = admin.status(qid)
        assert st["status"] in ("pending", "running"), f"query ended before the kill: {st}"
        prog = st["progress"]
        if prog["rounds_done"] >= 3 and prog["phase"] in ("share_keys", "masked_input", "unmasking"):
            break
        assert time.monotonic() < deadline, prog
        time.sleep(0.05)
    done_before = prog["rounds_done"]
    server.kill9()
    server.start()
    resumed = admin.status(qid)["progress"]
    assert resumed["rounds_done"] >= done_before >= 3, (done_before, resumed)  # not restarted from 0
    final = admin.wait(qid, timeout_s=240)
    assert final["status"] == "succeeded", final
    res = admin.result(qid)["result"]
    assert res["rounds"] == 8 and res["stop_reason"] == "completed"
    assert abs(auc_of(res) - central_auc()) <= 0.02
    assert [h["round"] for h in res["history"]] == [0, 4, 8]
    assert res["server_rounds"] == 8 + 3  # every training/eval round decoded exactly once across the restart
    audit_clean(server.url, admin.token)  # one task per cohort across the restart, one charge, one release


@pytest.mark.timeout(1000)
def test_frecency_300_devices(server: Server, admin: AnalystClient, bc_fleet: Fleet,
                              tmp_path_factory: pytest.TempPathFactory) -> None:
    bc_fleet.stop()  # these devices have no urlbar rows
    n, rounds = 300, 6
    fleet = Fleet(server.url, n, tmp_path_factory.mktemp("frecency"), scenario="frecency", seed=3)
    try:
        spec = {"kind": "training", "name": "frecency", "source": "urlbar",
                "params": frecency.example_params(rounds=rounds, eval_every=2),
                # the fleet drops nothing: 2 % allowed, a graph of degree 170 at the devices' floor (not complete)
                "cohort": {"min_clients": 220, "max_clients": n, "phase_timeout_s": 70, "dropout_allowance": 0.02}}
        out = _run(admin, spec, timeout_s=900)
    finally:
        fleet.stop()
    res = out["result"]
    hist = res["history"]
    curve = [(h["round"], round(h["eval_loss"], 2), round(h["mean_rank"], 3)) for h in hist]
    fresh = [row for i in range(10_000, 10_100) for row in generate("frecency", 3, i)["urlbar"]]
    before, after = urlbar_sim.evaluate(frecency.HANDCRAFTED, fresh), urlbar_sim.evaluate(res["weights"], fresh)
    print(json.dumps({"curve": curve, "seconds": round(out["seconds"], 1), "weights": res["weights"],
                      "fresh_before": before, "fresh_after": after}))
    assert [h["round"] for h in hist] == list(range(0, rounds + 1, 2))
    assert hist[-1]["eval_loss"] < hist[0]["eval_loss"]
    assert min(h["mean_rank"] for h in hist[1:]) < hist[0]["mean_rank"]
    assert after["loss"] < before["loss"] and after["mean_rank"] < before["mean_rank"]
