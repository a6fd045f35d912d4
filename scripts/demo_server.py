"""`make demo` (server part): a server on a temporary SQLite file, 1,000 simulated devices, and the queries
in DEMOS submitted through the `fa` CLI code path; each result is printed beside the simulator's ground truth.

Add a demo by appending to DEMOS (title, spec). Ground truth is computed in process with the kind's own
code (queries.local_run.run_locally) over the devices the server reports as contributors (single-round
queries: exact), and over the whole fleet. Last, `fa audit` checks the public transparency log of it all.

Deadlines come from a measurement (`calibrate`), not a fixed 6 s: a busy machine gets longer phases. With
`--outcome FILE` each step's Outcome is written there as JSON for scripts/demo.py's summary; `--workdir DIR`
keeps the database and the server's and fleets' logs in DIR.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
from rich.console import Console
from rich.table import Table

from analyst_client.cli import AnalystClient, _flatten
from devstack.processes import Fleet, Issuer, Server, fresh_database, new_app_key_file
from fleet_sim import deadlines as deadlines_of_this_machine
from queries.local_run import run_locally
from queries.registry import get_kind
from scripts import demo_training
from scripts.demo_training import Deadlines, Outcome, SubmitFailed

DEVICES = 1000
SCENARIO = "mixed"
# cohort.dropout_allowance 0.1 (the default is 0.15): the fleet drops 5 %, and the server sizes the neighbour graph for
# the allowance at the devices' safety floor (docs/secagg.md): degree 434 for 1,000 devices at 0.1, 786 at 0.15
DEMOS: list[dict[str, Any]] = [
    {
        "step": "histogram",
        "title": "Which words do people type? (histogram, distributed DP skellam ε=1 δ=1e-6, 1,000 devices, 5 % dropping)",
        "spec": {
            "kind": "histogram",
            "name": "demo words",
            "source": "words",
            "params": {"buckets": ["moon", "sun", "star", "cloud", "rain", "snow", "wind", "storm"],
                       "other_bucket": "other", "max_contributions_per_device": 2},
            "privacy": {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6},
            "cohort": {"min_clients": 500, "max_clients": 1000, "dropout_allowance": 0.1},
        },
    },
    {
        "step": "feature_stats",
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
            "cohort": {"min_clients": 500, "max_clients": 1000, "dropout_allowance": 0.1},
        },
    },
    {
        "step": "heavy_hitters",
        "title": "Popular words without a dictionary (heavy_hitters, hardened TrieHH, skellam ε=1 δ=1e-6)",
        "spec": {
            "kind": "heavy_hitters",
            "name": "demo heavy hitters",
            "source": "words",
            "params": {"mode": "secagg", "max_length": 8, "alphabet": "abcdefghijklmnopqrstuvwxyz",
                       "max_frontier": 32},
            "privacy": {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6},
            "cohort": {"min_clients": 500, "max_clients": 1000, "dropout_allowance": 0.1},
        },
    },
    {
        "step": "quantiles",
        "title": "App start-up time p50/p90/p99 (quantiles: one noisy hierarchical histogram, skellam ε=1 δ=1e-6)",
        "spec": {
            "kind": "quantiles",
            "name": "demo start-up percentiles",
            "source": "startup",
            "params": {"features": [{"name": "startup_ms", "lower": 0, "upper": 10000}],
                       "quantiles": [0.5, 0.9, 0.99], "max_examples_per_device": 3},
            "privacy": {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6},
            "cohort": {"min_clients": 500, "max_clients": 1000, "dropout_allowance": 0.1},
        },
    },
]

FLEET_PROCESSES = 2
MIN_PHASE_TIMEOUT_S = 6.0
MIN_FORMATION_WAIT_S = 1.5


def calibrate(cohort: int = DEVICES, processes: int = FLEET_PROCESSES) -> tuple[Deadlines, str]:
    """The demo's deadlines from a measurement of this machine now (fleet_sim.deadlines): the phase deadline for a
    `cohort`-device cohort on `processes` fleet processes, with a floor; the formation wait is the calibration's
    own time. (deadlines, a one-line note)."""
    speed = deadlines_of_this_machine.measure()
    expected = speed.phase_seconds(cohort, processes)
    deadlines = Deadlines(speed.phase_timeout(cohort, processes, MIN_PHASE_TIMEOUT_S),
                          round(max(MIN_FORMATION_WAIT_S, speed.measured_s), 1))
    note = (f"deadlines: calibration ({speed.describe()}) → ≈ {expected:.1f} s for {cohort} devices on {processes} "
            f"processes → phase_timeout_s {deadlines.phase_timeout_s:g} (max({MIN_PHASE_TIMEOUT_S:g}, "
            f"{deadlines_of_this_machine.SAFETY:g} × that)), formation wait {deadlines.formation_wait_s:g} s; "
            "a failed query is retried once with doubled deadlines")
    return deadlines, note


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


def compare(console: Console, admin: AnalystClient, qid: str, spec: dict[str, Any], truth: dict[str, Any],
            res: dict[str, Any]) -> tuple[bool, str, str]:
    """Print the server's result beside the truth; (ok, the check made, the reason when not ok)."""
    rounds = admin.call("GET", f"/v1/admin/queries/{qid}/contributors")["rounds"]
    kind = get_kind(spec["kind"])

    def rows_of(ids: list[str]) -> list[list[Any]]:
        return [truth[d].get(spec["source"], []) for d in ids]

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
        if key.startswith(("scaler.", "contribution_bound.devices_by_rows")) or ".cdf." in key or ".ci95." in key:
            continue  # repeats of the features' values; the bound's histogram; a CDF's points; intervals shown beside
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
        return within_intervals(got, halfwidth, exp_c)
    if contrib_truth is not None:
        exact = res["result"] == contrib_truth
        console.print(f"[bold]{'EXACT' if exact else 'MISMATCH'}[/bold]: server result vs truth over contributors; "
                      f"privacy = {json.dumps(res['privacy'])}")
        return exact, "matched the truth over contributors", "" if exact else "differs from the truth"
    return True, "released (no truth to compare)", ""


def within_intervals(got: dict[str, Any], halfwidth: dict[str, float], truth: dict[str, Any]) -> tuple[bool, str, str]:
    """Noisy release: every value with a 95 % interval lies within twice its half-width of the truth over the
    contributors (a miss at 95 % is expected one time in twenty; at twice the width, about never)."""
    keys = [k for k in got if k in halfwidth and isinstance(truth.get(k), (int, float))
            and isinstance(got[k], (int, float)) and ".cdf." not in k]  # a CDF's points: plotted, not checked one by one
    if not keys:
        return True, "released (no interval to check)", ""
    far = [k for k in keys if abs(got[k] - truth[k]) > 2 * halfwidth[k]]
    within = sum(abs(got[k] - truth[k]) <= halfwidth[k] for k in keys)
    check = f"{len(keys)} values vs truth: {within} within 95 % interval, all within 2× required"
    return not far, check, f"{len(far)} values off (e.g. {far[0]})" if far else ""


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


def run_queries(console: Console, server: Server, analyst: str, admin_client: AnalystClient, tmp: Path,
                deadlines: Deadlines) -> list[Outcome]:
    """The DEMOS over one fleet of DEVICES; then the training demos (their own fleets)."""
    outcomes: list[Outcome] = []
    console.print(f"starting {DEVICES} simulated devices …")
    fleet: Fleet | None = Fleet(server.url, DEVICES, tmp, scenario=SCENARIO, dropout=0.05, seed=42, checkin_wait=10,
                                extra=["--processes", "2"])
    try:
        assert fleet is not None
        truth = fleet.truth()
        for demo in DEMOS:
            console.rule(demo["title"])
            step = f"query: {demo['step']}"
            try:
                qid, res = demo_training.submit(console, server.url, analyst, admin_client, tmp, demo["spec"], deadlines,
                                                 processes=FLEET_PROCESSES)
                ok, check, reason = compare(console, admin_client, qid, demo["spec"], truth, res)
                outcomes.append(Outcome(step, ok, check, reason))
            except SubmitFailed as exc:
                outcomes.append(Outcome(step, False, "query ran to the end", str(exc)))
            except Exception as exc:  # noqa: BLE001 - the summary reports any step's crash and the demo goes on
                outcomes.append(Outcome(step, False, "ran without error", f"{type(exc).__name__}: {exc}"))
        fleet.stop()  # the training demos bring fleets of their own (collections examples, urlbar)
        fleet = None
    finally:
        if fleet is not None:
            fleet.stop()
    return outcomes + demo_training.run(console, server, analyst, admin_client, tmp, deadlines)


def audit_step(console: Console, server: Server, admin: str) -> Outcome:
    """`fa audit` of everything the demo did (docs/transparency.md): the public log's heads and entries, each
    source's spend against its budget, and — with the admin token — the queries, results and charges the server
    reports against what it logged."""
    console.rule("the public transparency log: fa audit")
    fa = str(Path(sys.executable).with_name("fa"))
    cmd = [fa, "--server", server.url, "--token", admin, "audit"]
    console.print(f"$ fa --server {server.url} --token … audit")
    code = subprocess.call(cmd)
    return Outcome("audit: transparency log", code == 0, "fa audit found nothing (heads, entries, spend, results)",
                   "" if code == 0 else f"fa audit exited {code}: its findings are above")


@contextlib.contextmanager
def identity_issuer(tmp: Path) -> Iterator[Issuer]:
    """A real `fa-issuer` for the demo (docs/identities.md), and the app backend's key the fleets sign their
    credentials with: exported as FA_ISSUER_URL / FA_APP_KEY_FILE, which fa-server and every fa-sim read."""
    key_file = tmp / "app-backend.key"
    app_key = new_app_key_file(key_file)
    (tmp / "issuer").mkdir(exist_ok=True)
    issuer = Issuer(tmp / "issuer", {"fa-sim": bytes(app_key.verify_key)}).start()
    saved = {k: os.environ.get(k) for k in ("FA_ISSUER_URL", "FA_APP_KEY_FILE")}
    os.environ.update(FA_ISSUER_URL=issuer.url, FA_APP_KEY_FILE=str(key_file))
    try:
        yield issuer
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        issuer.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.demo_server", description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, help="database and logs here (default: a temporary directory, removed)")
    ap.add_argument("--outcome", type=Path, help="write each step's outcome here as JSON")
    args = ap.parse_args(argv)
    console = Console(width=max(Console().width, 130))  # keys of the comparison tables stay readable
    with contextlib.ExitStack() as stack:
        tmp = args.workdir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fa-demo-")))
        tmp.mkdir(parents=True, exist_ok=True)
        outcomes: list[Outcome] = []
        try:
            deadlines, note = calibrate()
            console.print(note)
            issuer = stack.enter_context(identity_issuer(tmp))
            console.print(f"identity issuer on {issuer.url}: devices enrol with it, the server admits only them")
            url = f"sqlite+aiosqlite:///{tmp / 'fa.db'}"
            fresh_database(url)
            server = Server(url, tmp / "server.log",
                            env={"FA_COHORT_FORMATION_WAIT_S": str(deadlines.formation_wait_s)}).start()
            try:
                analyst, admin = server.token("analyst"), server.token("admin")
                console.print(f"server on {server.url} (SQLite {tmp / 'fa.db'}; logs in {tmp})")
                outcomes = run_queries(console, server, analyst, AnalystClient(server.url, admin), tmp, deadlines)
                outcomes.append(audit_step(console, server, admin))
            finally:
                server.stop()
        except Exception as exc:  # noqa: BLE001 - a crash outside the steps is a step of its own in the summary
            outcomes.append(Outcome("server demo", False, "ran without error", f"{type(exc).__name__}: {exc}"))
            raise
        finally:
            if args.outcome is not None:
                args.outcome.write_text(json.dumps([o.to_json() for o in outcomes], indent=1))
        return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
