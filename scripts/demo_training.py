"""`make demo` (training part, called by scripts/demo_server.py after the single-round demos): on the same
server, with fleets of their own, submitted through the `fa` CLI code path:

1. breast cancer over 50 label-skewed devices: the README's DP example (examples/): a `feature_stats`
   query for the scaling, then logistic regression (FedSGD, 10 rounds) with distributed DP (discrete Gaussian
   ε = 8, the DP defaults: uniform weighting, adaptive clipping) — prints the noisy history with its intervals,
   the clip norms and the test ROC AUC beside scikit-learn's;
2. the frecency example (Rprop on secure sign votes) over 300 simulated browsers, 6 rounds — prints the
   curve (round, eval loss, mean rank) and the fresh-interaction metrics before/after.
Returns the number of failed demos.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from analyst_client import cli as analyst_cli
from analyst_client.cli import AnalystClient
from fleet_sim.scenarios import generate
from fleet_sim.scenarios.datasets import breast_cancer_split
from tests.support.devstack import Fleet, Server

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
BC_DEVICES = 50
FRECENCY_DEVICES = 300


def breast_cancer_specs(scaling: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(feature_stats spec, training spec) of the README's DP example; the training spec's `scaling` is the
    feature_stats answer once known."""
    stats = json.loads((EXAMPLES / "breast_cancer_stats.json").read_text())
    train = json.loads((EXAMPLES / "breast_cancer_train_dp.json").read_text())
    train["params"]["scaling"] = scaling
    return stats, train


def _submit(console: Console, server: Server, token: str, admin: AnalystClient, tmp: Path, spec: dict[str, Any]) -> dict[str, Any] | None:
    """Submit through the `fa` CLI code path and wait; the whole answer of GET …/result (None on failure)."""
    path = tmp / "spec.json"
    path.write_text(json.dumps(spec))
    started = time.perf_counter()
    code = analyst_cli.main(["--server", server.url, "--token", token, "submit", str(path), "--wait"])
    console.print(f"(fa submit --wait: exit {code}, {time.perf_counter() - started:.1f} s)")
    if code != 0:
        return None
    qid = admin.call("GET", "/v1/queries")["queries"][0]["id"]
    return admin.result(qid)


def _history_table(title: str, history: list[dict[str, Any]], keys: list[str], uncertainty: dict[str, Any] | None = None) -> Table:
    """The history, each noisy value with its 95 % interval."""
    table = Table(title=title)
    for k in ["round", *keys]:
        table.add_column(k, justify="right")
    for i, h in enumerate(history):
        cells = [str(h["round"])]
        for k in keys:
            u = (uncertainty or {}).get(f"/history/{i}/{k}")
            cells.append(f"{h[k]:.4g}" + (f" [{u['ci95'][0]:.3g}, {u['ci95'][1]:.3g}]" if u else ""))
        table.add_row(*cells)
    return table


def breast_cancer_demo(console: Console, server: Server, token: str, admin: AnalystClient, tmp: Path) -> bool:
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    from queries.training import TrainedModel

    console.rule(f"Training: logistic regression on breast cancer over {BC_DEVICES} label-skewed devices, discrete "
                 "Gaussian ε=8 (the README's example)")
    fleet = Fleet(server.url, BC_DEVICES, tmp, scenario="breast_cancer_train", seed=7)
    try:
        stats_spec, _ = breast_cancer_specs()
        stats = _submit(console, server, token, admin, tmp, stats_spec)
        if stats is None:
            return False
        _, train_spec = breast_cancer_specs(stats)
        out = _submit(console, server, token, admin, tmp, train_spec)
    finally:
        fleet.stop()
    if out is None:
        return False
    res, sp = out["result"], breast_cancer_split()
    console.print(_history_table("history (federated evaluation under DP, 95 % intervals)", res["history"],
                                 ["loss", "eval_loss", "accuracy"], out.get("uncertainty")))
    console.print(f"stop reason {res['stop_reason']}, best round {res['best_round']}, clip norms "
                  f"{[round(c, 3) for c in res['clip_norms']]}, ε spent {out['privacy']['epsilon_spent']:.4g}")
    mean, std = sp.X_train.mean(axis=0), sp.X_train.std(axis=0)
    ref = LogisticRegression(max_iter=5000).fit((sp.X_train - mean) / std, sp.y_train)
    auc_ref = roc_auc_score(sp.y_test, ref.decision_function((sp.X_test - mean) / std))
    auc_fed = roc_auc_score(sp.y_test, TrainedModel(res).scores(sp.X_test))
    console.print(f"[bold]test ROC AUC[/bold]: federated with DP {auc_fed:.4f} after {res['rounds']} rounds "
                  f"({res['server_rounds']} server rounds) vs scikit-learn centrally without noise {auc_ref:.4f}")
    return abs(auc_fed - auc_ref) <= 0.03


def frecency_demo(console: Console, server: Server, token: str, admin: AnalystClient, tmp: Path) -> bool:
    from fleet_sim import urlbar_sim
    from queries.training import frecency

    console.rule(f"Training: frecency (Rprop on secure sign votes) over {FRECENCY_DEVICES} simulated browsers")
    spec = {"kind": "training", "name": "demo frecency", "source": "urlbar",
            "params": frecency.example_params(rounds=6, eval_every=2),
            "cohort": {"min_clients": 250, "max_clients": FRECENCY_DEVICES, "phase_timeout_s": 15}}
    fleet = Fleet(server.url, FRECENCY_DEVICES, tmp, scenario="frecency", seed=3, extra=["--processes", "2"])
    try:
        out = _submit(console, server, token, admin, tmp, spec)
    finally:
        fleet.stop()
    if out is None:
        return False
    res = out["result"]
    console.print(_history_table("curve (held-out interactions)", res["history"], ["eval_loss", "mean_rank", "chars_typed"]))
    fresh = [row for i in range(10_000, 10_100) for row in generate("frecency", 3, i)["urlbar"]]
    before, after = urlbar_sim.evaluate(frecency.HANDCRAFTED, fresh), urlbar_sim.evaluate(res["weights"], fresh)
    console.print(f"fresh interactions: handcrafted {json.dumps(before)}\n                    learned     {json.dumps(after)}")
    console.print(f"learned weights: {dict(zip(res['weight_names'], (round(w, 2) for w in res['weights'])))}")
    return after["mean_rank"] < before["mean_rank"]


def run(console: Console, server: Server, token: str, admin: AnalystClient, tmp: Path) -> int:
    """Both training demos; the caller must have stopped other fleets (their devices lack these collections)."""
    failures = 0
    for demo in (breast_cancer_demo, frecency_demo):
        if not demo(console, server, token, admin, tmp):
            console.print(f"[bold red]{demo.__name__} failed[/bold red]")
            failures += 1
    return failures
