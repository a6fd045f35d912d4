"""`make demo` (server part): a server on a temporary SQLite file, 1,000 simulated devices, and the queries
in DEMOS submitted through the `fa` CLI code path; each result is printed beside the simulator's ground truth.

Add a demo by appending to DEMOS (title, spec). Ground truth is computed in process with the kind's own
code (queries.local_run.run_locally) over the devices the server reports as contributors (single-round
queries: exact), and over the whole fleet.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
from rich.console import Console
from rich.table import Table

from analyst_client import cli as analyst_cli
from analyst_client.cli import AnalystClient, _flatten
from queries.local_run import run_locally
from queries.registry import get_kind
from scripts import demo_training
from tests.support.devstack import Fleet, Server, fresh_database

DEVICES = 1000
SCENARIO = "mixed"
DEMOS: list[dict[str, Any]] = [
    {
        "title": "Which words do people type? (histogram, distributed DP skellam ε=1 δ=1e-6, 1,000 devices, 5 % dropping)",
        "spec": {
            "kind": "histogram",
            "name": "demo words",
            "source": "words",
            "params": {"buckets": ["moon", "sun", "star", "cloud", "rain", "snow", "wind", "storm"],
                       "other_bucket": "other", "max_contributions_per_device": 2},
            "privacy": {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6},
            "cohort": {"min_clients": 500, "max_clients": 1000, "phase_timeout_s": 6},
        },
    },
    {
        "title": "Scaling parameters of age, income, sessions (feature_stats: rows per device bound chosen from the data, "
                 "then two rounds; skellam ε=1 δ=1e-6)",
        "spec": {
            "kind": "feature_stats",
            "name": "demo feature scaling",
            "source": "features",
            "params": {"features": [{"name": "age", "lower": 18, "upper": 90},
                                    {"name": "income", "lower": 0, "upper": 200000},
                                    {"name": "sessions", "lower": 0, "upper": 20}],
                       "bins": 4},
            "privacy": {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6},
            "cohort": {"min_clients": 500, "max_clients": 1000, "phase_timeout_s": 6},
        },
    },
    {
        "title": "Popular words without a dictionary (heavy_hitters, hardened TrieHH, skellam ε=1 δ=1e-6)",
        "spec": {
            "kind": "heavy_hitters",
            "name": "demo heavy hitters",
            "source": "words",
            "params": {"mode": "secagg", "max_length": 8, "alphabet": "abcdefghijklmnopqrstuvwxyz",
                       "max_frontier": 32},
            "privacy": {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6},
            "cohort": {"min_clients": 500, "max_clients": 1000, "phase_timeout_s": 6},
        },
    },
]


def _num(value: Any) -> str:
    """A released value for the table: numbers with 5 significant digits."""
    if isinstance(value, float):
        return f"{value:.5g}"
    return str(value)


def _pointer_key(path: str) -> str:
    """The table key (`_flatten`'s dotted form) of a JSON Pointer."""
    out = ""
    for token in path.split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        out += f"[{token}]" if token.isdigit() else (f".{token}" if out else token)
    return out


def compare(console: Console, admin: AnalystClient, qid: str, spec: dict[str, Any], truth: dict[str, Any]) -> None:
    res = admin.result(qid)
    rounds = admin.call("GET", f"/v1/admin/queries/{qid}/contributors")["rounds"]
    kind = get_kind(spec["kind"])
    rows_of = lambda ids: [truth[d].get(spec["source"], []) for d in ids]  # noqa: E731
    all_truth, _ = run_locally(kind, spec["params"], rows_of(sorted(truth)))
    contrib_truth, contrib = None, None
    if len(rounds) == 1:
        contrib = rounds["0"]
        contrib_truth, _ = run_locally(kind, spec["params"], rows_of(contrib))
    elif spec["kind"] == "feature_stats":  # counts and means describe the first-moment round's contributors
        contrib = rounds[str(len(rounds) - 2)]
        bound = res["result"]["contribution_bound"]["max_examples_per_device"]
        contrib_truth, _ = run_locally(kind, {**spec["params"], "max_examples_per_device": bound}, rows_of(contrib))
    table = Table(title=f"{spec['kind']}: server result vs ground truth")
    table.add_column("key")
    table.add_column("server (secure aggregation)", justify="right")
    table.add_column("± 95 %", justify="right")
    if contrib_truth is not None and contrib is not None:
        table.add_column(f"truth over the {len(contrib)} contributors", justify="right")
    table.add_column(f"truth over all {len(truth)} devices", justify="right")
    got = dict(_flatten(res["result"]))
    halfwidth = {_pointer_key(p): (u["ci95"][1] - u["ci95"][0]) / 2 for p, u in res.get("uncertainty", {}).items()}
    exp_c = dict(_flatten(contrib_truth)) if contrib_truth is not None else {}
    exp_a = dict(_flatten(all_truth))
    for key in got:
        if key.startswith(("scaler.", "contribution_bound.devices_by_rows")):
            continue  # repeats of the features' values; the bound's histogram
        cells = [key, _num(got[key]), _num(halfwidth[key]) if key in halfwidth else ""]
        if contrib_truth is not None:
            cells.append(_num(exp_c.get(key)))
        cells.append(_num(exp_a.get(key)))
        table.add_row(*cells)
    console.print(table)
    for w in res.get("warnings", [])[:8]:
        console.print(f"[yellow]warning[/yellow] {w.get('path', '')}: {w['message']}")
    if len(res.get("warnings", [])) > 8:
        console.print(f"[yellow]… {len(res['warnings']) - 8} more warnings[/yellow]")
    if res["privacy"].get("mechanism", "none") != "none":
        show_privacy(console, admin, res, spec, got, exp_c)
    elif contrib_truth is not None:
        verdict = "EXACT" if res["result"] == contrib_truth else "MISMATCH"
        console.print(f"[bold]{verdict}[/bold]: server result vs truth over contributors; privacy = {json.dumps(res['privacy'])}")


def show_privacy(console: Console, admin: AnalystClient, res: dict[str, Any], spec: dict[str, Any],
                 got: dict[str, Any], exp_c: dict[str, Any]) -> None:
    """Noisy result: the error against the contributors' truth, the privacy summary, the source's budget."""
    errors = [abs(got[k] - exp_c[k]) for k in got
              if k.startswith("counts.") and isinstance(exp_c.get(k), (int, float))]
    std = [r.get("noise_std_released") for r in res["privacy"].get("noise", []) if r]
    if errors and std:
        console.print(f"[bold]NOISY[/bold] ({res['privacy']['mechanism']}): max |released − truth over contributors| "
                      f"= {max(errors)}, noise std in released units {std[0]:.2f}")
    p = res["privacy"]
    console.print(f"privacy: {p['mechanism']} ε={p['epsilon']:g} δ={p['delta']:g}, ε spent {p['epsilon_spent']:.4g} over "
                  f"{p['rounds']} rounds, t_min {p.get('t_min')}, contributors {p['contributors']}")
    for step in p.get("budget_split", []):
        console.print(f"  round {step['round']} ({step['purpose']}): {step['budget_share']:.0%} of the budget "
                      f"(ε {step['epsilon_alone']:.3g} on its own)")
    budget = admin.call("GET", f"/v1/budgets/{spec['source']}")
    console.print(f"budget of source {spec['source']!r}: spent ε={budget['spent_epsilon']:g} δ={budget['spent_delta']:g}, "
                  f"remaining ε={budget['remaining_epsilon']:g} δ={budget['remaining_delta']:g} "
                  f"of ε={budget['total_epsilon']:g} δ={budget['total_delta']:g}")


def main() -> int:
    console = Console(width=max(Console().width, 130))  # keys of the comparison tables stay readable
    with tempfile.TemporaryDirectory(prefix="fa-demo-") as tmp_s:
        tmp = Path(tmp_s)
        url = f"sqlite+aiosqlite:///{tmp / 'fa.db'}"
        fresh_database(url)
        server = Server(url, tmp / "server.log", env={"FA_COHORT_FORMATION_WAIT_S": "1.5"}).start()
        fleet = None
        try:
            analyst, admin = server.token("analyst"), server.token("admin")
            console.print(f"server on {server.url} (SQLite {tmp / 'fa.db'}); starting {DEVICES} simulated devices …")
            fleet = Fleet(server.url, DEVICES, tmp, scenario=SCENARIO, dropout=0.05, seed=42, checkin_wait=10,
                          extra=["--processes", "2"])
            truth = fleet.truth()
            admin_client = AnalystClient(server.url, admin)
            failures = 0
            for demo in DEMOS:
                console.rule(demo["title"])
                spec_path = tmp / "spec.json"
                spec_path.write_text(json.dumps(demo["spec"]))
                started = time.perf_counter()
                code = analyst_cli.main(["--server", server.url, "--token", analyst, "submit", str(spec_path), "--wait"])
                console.print(f"(fa submit --wait: exit {code}, {time.perf_counter() - started:.1f} s)")
                if code != 0:
                    failures += 1
                    continue
                qid = admin_client.call("GET", "/v1/queries")["queries"][0]["id"]
                compare(console, admin_client, qid, demo["spec"], truth)
            fleet.stop()  # the training demos bring fleets of their own (collections examples, urlbar)
            fleet = None
            failures += demo_training.run(console, server, analyst, admin_client, tmp)
            return 1 if failures else 0
        finally:
            if fleet is not None:
                fleet.stop()
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
