"""`make demo` (training part, called by scripts/demo_server.py after the single-round demos): on the same
server, with fleets of their own, submitted through the `fa` CLI code path:

1. breast cancer over 398 devices holding one patient's record each: the README's DP pipeline (examples/): a
   `feature_stats` query for the scaling, then logistic regression (FedSGD, 10 rounds), both with distributed DP
   within the production caps (discrete Gaussian ε = 2, δ = 1e-6; the DP defaults: uniform weighting, adaptive
   clipping) — prints the noisy history with its intervals, the clip norms and the test ROC AUC beside
   scikit-learn's;
2. the frecency example (Rprop on secure sign votes) over 300 simulated browsers, 6 rounds — prints the
   curve (round, eval loss, mean rank) and the fresh-interaction metrics before/after.
`run` returns one Outcome per demo (scripts/demo.py's summary). Every submission goes through `submit`:
deadlines from the calibration (scripts/demo_server.py), one retry with doubled deadlines on failure.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from analyst_client import cli as analyst_cli
from analyst_client.cli import AnalystClient
from devstack import proving
from devstack.processes import Fleet, Server
from fleet_sim.scenarios import generate
from fleet_sim.scenarios.datasets import breast_cancer_split, breast_cancer_train_size

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
BC_DEVICES = breast_cancer_train_size()
FRECENCY_DEVICES = 300


def breast_cancer_specs(scaling: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(feature_stats spec, training spec) of the README's DP example; the training spec's `scaling` is the
    feature_stats answer once known."""
    stats = json.loads((EXAMPLES / "breast_cancer_stats.json").read_text())
    train = json.loads((EXAMPLES / "breast_cancer_train_dp.json").read_text())
    train["params"]["scaling"] = scaling
    return stats, train


@dataclass
class Outcome:
    """One step of the demo for the summary: `check` says what was compared, `reason` why it failed."""

    step: str
    ok: bool
    check: str
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class SubmitFailed(Exception):
    """`fa submit --wait` failed twice (the second time with doubled deadlines); the message is its reason."""


@dataclass
class Deadlines:
    """The demo's cohort deadlines, from a measurement of this machine (scripts/demo_server.py `calibrate`)."""

    phase_timeout_s: float
    formation_wait_s: float

    def apply(self, spec: dict[str, Any], factor: float = 1.0) -> dict[str, Any]:
        """`spec` with cohort.phase_timeout_s at least the calibrated deadline (× factor)."""
        cohort = dict(spec.get("cohort") or {})
        cohort["phase_timeout_s"] = round(max(cohort.get("phase_timeout_s", 0.0), self.phase_timeout_s) * factor, 1)
        return {**spec, "cohort": cohort}


FLEET_PROVING_CAP_S = 30.0
"""The demo keeps validity proofs on while its fleet proves for one cohort within this (devstack/proving.py)."""


class _Tee(io.TextIOBase):
    """stderr that is also kept: the CLI's progress stays on the terminal, its last `fa:` line is the reason."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.kept = inner, io.StringIO()

    def write(self, s: str) -> int:
        self.kept.write(s)
        self.inner.write(s)
        return len(s)

    def flush(self) -> None:
        self.inner.flush()

    def isatty(self) -> bool:
        return bool(self.inner.isatty())


def _cli_submit(console: Console, server_url: str, token: str, path: Path) -> tuple[int, str]:
    """`fa submit PATH --wait` in process: (exit code, its last `fa:` message)."""
    tee = _Tee(sys.stderr)
    started = time.perf_counter()
    with contextlib.redirect_stderr(tee):
        code = analyst_cli.main(["--server", server_url, "--token", token, "submit", str(path), "--wait"])
    console.print(f"(fa submit --wait: exit {code}, {time.perf_counter() - started:.1f} s)")
    said = [ln[4:].strip() for ln in tee.kept.getvalue().splitlines() if ln.startswith("fa: ")]
    return code, (said[-1] if said else f"exit {code}")


def submit(console: Console, server_url: str, token: str, admin: AnalystClient, tmp: Path, spec: dict[str, Any],
           deadlines: Deadlines, processes: int = 1) -> tuple[str, dict[str, Any]]:
    """Submit through the `fa` CLI code path with the calibrated deadlines and wait; on failure once more with
    doubled deadlines. (query id, the whole answer of GET …/result); SubmitFailed with the reason otherwise."""
    path = tmp / "spec.json"
    reason = ""
    for attempt, factor in enumerate((1.0, 2.0)):
        sent, note = proving.fit(deadlines.apply(spec, factor), processes, FLEET_PROVING_CAP_S)
        if note and attempt == 0:
            console.print(f"[dim]{note}[/dim]")
        path.write_text(json.dumps(sent))
        code, reason = _cli_submit(console, server_url, token, path)
        if code == 130:  # Ctrl-C: the CLI stopped following; so does the demo
            raise KeyboardInterrupt
        if code == 0:
            qid = admin.call("GET", "/v1/queries")["queries"][0]["id"]
            return qid, admin.result(qid)
        if attempt == 0:
            console.print(f"[yellow]failed ({reason}); retrying once with doubled deadlines "
                          f"(phase_timeout_s {sent['cohort']['phase_timeout_s'] * 2:g})[/yellow]")
    raise SubmitFailed(f"{reason} (also with doubled deadlines)")


def _history_table(title: str, history: list[dict[str, Any]], keys: list[str], uncertainty: dict[str, Any] | None = None) -> Table:
    """The history, each noisy value with its 95 % interval (a key no entry has is left out: without a holdout the
    loss is released once, as eval_loss)."""
    table = Table(title=title)
    keys = [k for k in keys if any(k in h for h in history)]
    for k in ["round", *keys]:
        table.add_column(k, justify="right")
    for i, h in enumerate(history):
        cells = [str(h["round"])]
        for k in keys:
            u = (uncertainty or {}).get(f"/history/{i}/{k}")
            value = h.get(k)
            if not isinstance(value, (int, float)):
                cells.append("—")
                continue
            cells.append(f"{value:.4g}" + (f" [{u['ci95'][0]:.3g}, {u['ci95'][1]:.3g}]" if u else ""))
        table.add_row(*cells)
    return table


def breast_cancer_demo(console: Console, server: Server, token: str, admin: AnalystClient, tmp: Path,
                       deadlines: Deadlines) -> Outcome:
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    from queries.training import TrainedModel

    console.rule(f"Training: logistic regression on breast cancer over {BC_DEVICES} devices of one record each, "
                 "discrete Gaussian ε=2 for the scaling and for the model (the README's pipeline)")
    fleet = Fleet(server.url, BC_DEVICES, tmp, scenario="breast_cancer_patient", seed=7, extra=["--processes", "2"])
    try:
        stats_spec, _ = breast_cancer_specs()
        _, stats = submit(console, server.url, token, admin, tmp, stats_spec, deadlines, processes=2)
        _, train_spec = breast_cancer_specs(stats)
        _, out = submit(console, server.url, token, admin, tmp, train_spec, deadlines, processes=2)
    finally:
        fleet.stop()
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
    ok = auc_fed >= 0.97
    return Outcome("training: logistic regression (DP)", ok,
                   f"test ROC AUC {auc_fed:.3f} ≥ 0.97 (scikit-learn's without noise: {auc_ref:.3f})",
                   "" if ok else f"AUC {auc_fed:.3f} below 0.97")


def frecency_demo(console: Console, server: Server, token: str, admin: AnalystClient, tmp: Path,
                  deadlines: Deadlines) -> Outcome:
    from fleet_sim import urlbar_sim
    from queries.training import frecency

    console.rule(f"Training: frecency (Rprop on secure sign votes) over {FRECENCY_DEVICES} simulated browsers")
    spec = {"kind": "training", "name": "demo frecency", "source": "urlbar",
            "params": frecency.example_params(rounds=6, eval_every=2),
            "cohort": {"min_clients": 250, "max_clients": FRECENCY_DEVICES, "phase_timeout_s": 15}}
    fleet = Fleet(server.url, FRECENCY_DEVICES, tmp, scenario="frecency", seed=3, extra=["--processes", "2"])
    try:
        _, out = submit(console, server.url, token, admin, tmp, spec, deadlines, processes=2)
    finally:
        fleet.stop()
    res = out["result"]
    console.print(_history_table("curve (held-out interactions)", res["history"], ["eval_loss", "mean_rank", "chars_typed"]))
    fresh = [row for i in range(10_000, 10_100) for row in generate("frecency", 3, i)["urlbar"]]
    before, after = urlbar_sim.evaluate(list(frecency.HANDCRAFTED), fresh), urlbar_sim.evaluate(res["weights"], fresh)
    console.print(f"fresh interactions: handcrafted {json.dumps(before)}\n                    learned     {json.dumps(after)}")
    console.print(f"learned weights: {dict(zip(res['weight_names'], (round(w, 2) for w in res['weights'])))}")
    ok = after["mean_rank"] < before["mean_rank"]
    return Outcome("training: frecency (Rprop)", ok,
                   f"mean rank {after['mean_rank']:.3g} learned < {before['mean_rank']:.3g} handcrafted",
                   "" if ok else "the learned weights rank no better")


def run(console: Console, server: Server, token: str, admin: AnalystClient, tmp: Path,
        deadlines: Deadlines) -> list[Outcome]:
    """Both training demos; the caller must have stopped other fleets (their devices lack these collections)."""
    outcomes = []
    for demo, step in ((breast_cancer_demo, "training: logistic regression (DP)"),
                       (frecency_demo, "training: frecency (Rprop)")):
        try:
            outcome = demo(console, server, token, admin, tmp, deadlines)
        except SubmitFailed as exc:
            outcome = Outcome(step, False, "query ran to the end", str(exc))
        except Exception as exc:  # noqa: BLE001 - the summary reports any step's crash and the demo goes on
            outcome = Outcome(step, False, "ran without error", f"{type(exc).__name__}: {exc}")
        if not outcome.ok:
            console.print(f"[bold red]{step} failed[/bold red]: {outcome.reason}")
        outcomes.append(outcome)
    return outcomes
