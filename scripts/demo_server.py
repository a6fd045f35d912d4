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
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from analytics_server.devstack import Fleet, Server, fresh_database  # noqa: E402
from device_sdk import analyst_cli  # noqa: E402
from device_sdk.analyst_cli import AnalystClient, _flatten  # noqa: E402
from queries.kind import get_kind  # noqa: E402
from queries.local_run import run_locally  # noqa: E402

DEVICES = 1000
SCENARIO = "mixed"
DEMOS: list[dict[str, Any]] = [
    {
        "title": "Which words do people type? (histogram, 1,000 devices, 5 % dropping mid-protocol)",
        "spec": {
            "kind": "histogram",
            "name": "demo words",
            "source": "words",
            "params": {"buckets": ["moon", "sun", "star", "cloud", "rain", "snow", "wind", "storm"],
                       "other_bucket": "other", "max_contributions_per_device": 2},
            "privacy": {"mechanism": "none"},
            "cohort": {"min_clients": 500, "max_clients": 1000, "phase_timeout_s": 10},
        },
    },
]


def compare(console: Console, admin: AnalystClient, qid: str, spec: dict[str, Any], truth: dict[str, Any]) -> None:
    res = admin.result(qid)
    rounds = admin.call("GET", f"/v1/admin/queries/{qid}/contributors")["rounds"]
    kind = get_kind(spec["kind"])
    rows_of = lambda ids: [truth[d].get(spec["source"], []) for d in ids]  # noqa: E731
    all_truth, _ = run_locally(kind, spec["params"], rows_of(sorted(truth)))
    contrib_truth = None
    if len(rounds) == 1:
        contrib_truth, _ = run_locally(kind, spec["params"], rows_of(rounds["0"]))
    table = Table(title=f"{spec['kind']}: server result vs ground truth")
    table.add_column("key")
    table.add_column("server (secure aggregation)", justify="right")
    if contrib_truth is not None:
        table.add_column(f"truth over the {len(rounds['0'])} contributors", justify="right")
    table.add_column(f"truth over all {len(truth)} devices", justify="right")
    got = dict(_flatten(res["result"]))
    exp_c = dict(_flatten(contrib_truth)) if contrib_truth is not None else {}
    exp_a = dict(_flatten(all_truth))
    for key in got:
        cells = [key, str(got[key])]
        if contrib_truth is not None:
            cells.append(str(exp_c.get(key)))
        cells.append(str(exp_a.get(key)))
        table.add_row(*cells)
    console.print(table)
    if contrib_truth is not None:
        verdict = "EXACT" if res["result"] == contrib_truth else "MISMATCH"
        console.print(f"[bold]{verdict}[/bold]: server result vs truth over contributors; privacy = {json.dumps(res['privacy'])}")


def main() -> int:
    console = Console()
    with tempfile.TemporaryDirectory(prefix="fa-demo-") as tmp_s:
        tmp = Path(tmp_s)
        url = f"sqlite+aiosqlite:///{tmp / 'fa.db'}"
        fresh_database(url)
        server = Server(url, tmp / "server.log", env={"FA_COHORT_FORMATION_WAIT_S": "3"}).start()
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
            return 1 if failures else 0
        finally:
            if fleet is not None:
                fleet.stop()
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
