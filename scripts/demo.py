"""`make demo`: the product end to end on this machine, ending with a one-screen summary.

Runs the in-process secure-aggregation demo (`secagg.demo`), then the server demo (scripts/demo_server.py: a
server on SQLite, a simulated fleet, a query of each kind, training), which writes each step's outcome to a
JSON file. The summary table lists every step with its status, the check it made and, for a failure, the
reason; the exit code is 1 if any step failed. The database and the server's and fleets' logs go to a
temporary directory, removed when everything passed and named in the summary otherwise.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent


def _run(cmd: list[str], keep_last_line: bool = False) -> tuple[int, str]:
    """Run `cmd` from the checkout, its output on the terminal; (exit code, with `keep_last_line` the last
    line it printed on stdout: secagg.demo says there why it failed)."""
    print(f"\n$ {' '.join(Path(c).name if i == 0 else c for i, c in enumerate(cmd))}\n", flush=True)
    if not keep_last_line:  # stdout and stderr stay the terminal's: the fa CLI draws its progress bars there
        return subprocess.call(cmd, cwd=ROOT), ""
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    last = ""
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        last = line.strip() or last
    return proc.wait(), last


def summary(outcomes: list[dict[str, Any]], workdir: Path | None) -> Table:
    """The summary table: step, status, the check it made, the reason of a failure."""
    table = Table(title="make demo: summary", caption=f"logs (server, fleets): {workdir}" if workdir else None)
    table.add_column("step")
    table.add_column("status")
    table.add_column("check")
    table.add_column("reason")
    for o in outcomes:
        status = "[green]ok[/green]" if o["ok"] else "[bold red]FAILED[/bold red]"
        reason = o.get("reason", "")
        table.add_row(o["step"], status, o["check"], reason if len(reason) <= 200 else reason[:199] + "…")
    return table


def main() -> int:
    workdir = Path(tempfile.mkdtemp(prefix="fa-demo-"))
    outcomes: list[dict[str, Any]] = []
    code, last = _run([sys.executable, "-m", "secagg.demo"], keep_last_line=True)
    outcomes.append({"step": "secagg demo (in process)", "ok": code == 0, "check": "server's sum matched the true sum",
                     "reason": "" if code == 0 else f"exit {code}: {last}"})
    outcome_file = workdir / "outcome.json"
    code, _ = _run([sys.executable, "-m", "scripts.demo_server", "--workdir", str(workdir),
                    "--outcome", str(outcome_file)])
    steps = json.loads(outcome_file.read_text()) if outcome_file.exists() else []
    outcomes.extend(steps)
    if code != 0 and all(o["ok"] for o in steps):  # a crash no step reported
        outcomes.append({"step": "server demo", "ok": False, "check": "ran to the end",
                         "reason": f"exit {code} before reporting its steps (its error is above)"})
    failed = not all(o["ok"] for o in outcomes)
    console = Console()
    console.print()
    console.print(summary(outcomes, workdir if failed else None))
    if failed:
        console.print(f"[bold red]demo FAILED[/bold red]: {sum(not o['ok'] for o in outcomes)} step(s); "
                      f"server and fleet logs kept in {workdir}")
        return 1
    shutil.rmtree(workdir, ignore_errors=True)
    console.print("[bold green]demo ok[/bold green]: every step passed its check")
    return 0


if __name__ == "__main__":
    sys.exit(main())
