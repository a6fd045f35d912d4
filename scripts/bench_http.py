"""HTTP benchmark (`make bench`): histogram rounds over loopback with simulated fleets.

- 1,000 and 5,000 devices: wall time of the round (submit → succeeded, and the sum of the secagg phase
  durations), check-ins per second the server answered while the fleet polled, server CPU seconds during the
  round (from /proc/<pid>/stat), device requests the server answered during it (per device, and CPU per
  request), and the same round with masking off; beside them the server's protocol work alone for that cohort
  (`secagg.bench`, no HTTP). Masking off is a benchmark-only
  switch: FA_BENCH_UNMASKED=1 in the environment of the server and simulator processes started here; no
  query field selects it and ordinary devices refuse it.
- 1,000 devices of which 10 % drop at a random phase (each device, per cohort): the masked round's wall time
  beside the same round without dropout.
- 10,000 devices: one masked round's wall time, server CPU and the server's peak memory (VmHWM).
- Checking the server (docs/secagg.md, "Devices that check the server"): 1,000 devices, the same masked round with
  the devices' cohort verification off (`verify_cohort: false`: they still sign their keys bound to the task, but
  check no peer), on (the default: every peer's key signature checked before any share is encrypted, every share
  opened under the channel bound to the task, before the masked input leaves) and on with identity tokens; every round runs the active model (the consistency round);
  per configuration the device requests per device, the devices' CPU per device (the `fa-sim` processes'
  CPU over the round, their check-in polling included) and the server's CPU.

The masked/unmasked and dropout comparisons run without validity proofs on both sides (an unmasked round
has nothing to verify them against), so their ratios measure masking alone; `bench_validity.py` prices the
proofs. The 10,000-device round uses the server's default validation.

Every round needs 80 % of the fleet (`min_clients`) and takes all of it (`max_clients`). Wall time and server
CPU are read between the server's own events (query submitted → succeeded); the benchmark polls the query's
status once a second (each status read costs the server ~3 ms of CPU, which would otherwise count as round work
in proportion to the round's length). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sqlite3
import subprocess
import threading
from datetime import datetime, timezone
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any
from collections.abc import Iterator

ROOT = Path(__file__).resolve().parent.parent
from analyst_client.cli import AnalystClient
from devstack.processes import Fleet, Issuer, Server, fresh_database, new_app_key_file
from secagg.plain import BENCH_UNMASKED_ENV

CLK_TCK = os.sysconf("SC_CLK_TCK")
AVAILABILITY_LAPSE_S = 6.0
"""A device stays available for a cohort until its long-poll + Retry-After + 5 s after its last check-in."""


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


class CpuSampler:
    """Samples a process's CPU seconds every 50 ms, so CPU can be read at the server's own event times."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time(), cpu_seconds(self.pid)))
            self._stop.wait(0.05)

    def at(self, when: float) -> float:
        before = [c for t, c in self.samples if t <= when]
        return before[-1] if before else self.samples[0][1]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def phase_seconds(url: str) -> dict[str, float]:
    text = urllib.request.urlopen(url + "/metrics", timeout=60).read().decode()
    out = {}
    for m in re.finditer(r'^fa_phase_duration_seconds_sum\{phase="([a-z_]+)"[^}]*\} ([0-9.e+-]+)$', text, re.M):
        out[m.group(1)] = round(float(m.group(2)), 2)
    return out


def metric(url: str, name: str, labels: str = "") -> float:
    """A /metrics series summed over its labels (those containing `labels` only, when given)."""
    text = urllib.request.urlopen(url + "/metrics", timeout=60).read().decode()
    total = 0.0
    for line in text.splitlines():
        if re.match(rf"^{re.escape(name)}(\{{.*\}})? ", line) and labels in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def server_events(db_path: Path, query_id: str) -> dict[str, datetime]:
    with sqlite3.connect(db_path) as db:
        rows = db.execute("SELECT type, created_at FROM events WHERE query_id = ? ORDER BY id", (query_id,)).fetchall()
    return {t: datetime.fromisoformat(ts).replace(tzinfo=timezone.utc) for t, ts in reversed(rows)}


def server_timeline(db_path: Path, query_id: str) -> dict[str, float]:
    """Seconds between the server's own events of the query (no client polling latency)."""
    when = server_events(db_path, query_id)  # first occurrence of each event type
    base = when["query.submitted"]
    span = lambda a, b: round((when[b] - when[a]).total_seconds(), 2)  # noqa: E731
    return {
        "submit_to_cohort_formed_s": span("query.submitted", "cohort.formed"),
        "cohort_s": span("cohort.formed", "cohort.finished"),
        "cohort_finished_to_result_s": span("cohort.finished", "query.succeeded"),
        "round_wall_s": round((when["query.succeeded"] - base).total_seconds(), 2),
    }


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of a process and its live descendants (an `fa-sim --processes N` fleet)."""
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            total += cpu_seconds(p)
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def one_round(n: int, unmasked: bool, processes: int, dropout: float = 0.0, checkins: bool = True,
              validation: str | None = None, server_env: dict[str, str] | None = None,
              policy: dict[str, Any] | None = None, identities: bool = False, buckets: int = 4,
              noise: dict[str, Any] | None = None) -> dict[str, Any]:
    """A `buckets`-bucket histogram round (the first four words of the fleet, then unused ones), with `noise` (a
    privacy block's mechanism, ε, δ) when given. `validation` sets the spec's privacy.validation (the server's default when None); `server_env` adds settings
    to the server's environment, `policy` is the fleet's device policy (`fa-sim --policy`); `identities`: a real
    `fa-issuer` beside the server, which then admits only enrolled devices, and the fleet enrols and pins its key."""
    env = {BENCH_UNMASKED_ENV: "1"} if unmasked else {}
    fleet_extra = ["--policy", json.dumps(policy)] if policy else []
    with tempfile.TemporaryDirectory(prefix="fa-bench-") as tmp_s, contextlib.ExitStack() as stack:
        tmp = Path(tmp_s)
        if identities:
            issuer_url, app_key_file = stack.enter_context(bench_issuer(tmp))
            server_env = {**(server_env or {}), "FA_ISSUER_URL": issuer_url}
            fleet_extra += ["--issuer", issuer_url, "--app-key", str(app_key_file)]
        url = f"sqlite+aiosqlite:///{tmp / 'fa.db'}"
        fresh_database(url)
        server = Server(url, tmp / "server.log", env={**env, "FA_RETRY_AFTER_S": "0.2", "FA_COHORT_FORMATION_WAIT_S": "2",
                                                      **(server_env or {})}).start()
        fleet = None
        try:
            admin = AnalystClient(server.url, server.token("admin"), timeout_s=120)
            deadline = time.monotonic() + 600
            checkins_per_s = None
            if checkins:  # 1) check-in throughput: the fleet polls without long-polling (retry_after 0.2 s)
                fleet = Fleet(server.url, n, tmp, scenario="words", seed=1, checkin_wait=0, env=env,
                              extra=["--processes", str(processes)])
                while metric(server.url, "fa_device_checkins_total") < 2 * n and time.monotonic() < deadline:
                    time.sleep(0.5)
                c0, t0 = metric(server.url, "fa_device_checkins_total"), time.monotonic()
                time.sleep(5)
                checkins_per_s = round((metric(server.url, "fa_device_checkins_total") - c0) / (time.monotonic() - t0), 1)
                fleet.stop()
                time.sleep(AVAILABILITY_LAPSE_S)  # else the round's cohort would seat the stopped fleet's devices
            # 2) the round, with the fleet long-polling its check-ins as real devices do
            fleet = Fleet(server.url, n, tmp, scenario="words", seed=2, checkin_wait=10, env=env, dropout=dropout,
                          extra=["--processes", str(processes), *fleet_extra])
            c1 = metric(server.url, "fa_device_checkins_total")
            while metric(server.url, "fa_device_checkins_total") < c1 + n and time.monotonic() < deadline:
                time.sleep(0.5)
            words = ["moon", "sun", "star", "cloud"] + [f"word{i}" for i in range(max(0, buckets - 4))]
            spec: dict[str, Any] = {"kind": "histogram", "source": "words", "params": {"buckets": words[:buckets]},
                                    "cohort": {"min_clients": int(n * 0.8), "max_clients": n, "phase_timeout_s": 300},
                                    "privacy": dict(noise or {})}
            if validation is not None:
                spec["privacy"]["validation"] = validation
            assert server.proc is not None
            requests_before = metric(server.url, "fa_http_responses_total", 'route="device"')
            sampler = CpuSampler(server.proc.pid)
            fleet_cpu0 = tree_cpu_seconds(fleet.proc.pid)
            start = time.perf_counter()
            qid = admin.submit(spec)["id"]
            final = admin.wait(qid, timeout_s=1800, poll_s=1.0)  # wall and CPU come from the server's own events
            wall = time.perf_counter() - start
            fleet_cpu = tree_cpu_seconds(fleet.proc.pid) - fleet_cpu0
            sampler.stop()
            ev = server_events(tmp / "fa.db", qid)
            cpu = sampler.at(ev["query.succeeded"].timestamp()) - sampler.at(ev["query.submitted"].timestamp())
            device_requests = metric(server.url, "fa_http_responses_total", 'route="device"') - requests_before
            res = admin.result(qid) if final["status"] == "succeeded" else {"result": {}}
            cohorts = admin.status(qid)["progress"].get("cohorts", {})
            return {
                "devices": n,
                "masking": not unmasked,
                "validation": res.get("privacy", {}).get("validation"),
                "buckets": buckets,
                "noise": noise or {},
                "dropout": dropout,
                "cohorts": cohorts,
                "status": final["status"],
                "clients": res["result"].get("clients"),
                **server_timeline(tmp / "fa.db", qid),
                "client_observed_wall_s": round(wall, 2),
                "phases_wall_s": round(metric(server.url, "fa_phase_duration_seconds_sum"), 2),
                "phase_s": phase_seconds(server.url),
                "server_cpu_s": round(cpu, 2),
                "server_cpu_ms_per_device": round(1000 * cpu / n, 3),
                "device_requests_per_device": round(device_requests / n, 2),
                "server_cpu_ms_per_device_request": round(1000 * cpu / device_requests, 3) if device_requests else None,
                "server_peak_rss_mb": round(peak_rss_mb(server.proc.pid), 1),
                "device_cpu_ms_per_device": round(1000 * fleet_cpu / n, 2),
                "threat_model": "active",
                "policy": policy or {},
                "identity_tokens": identities,
                "checkins_per_s": checkins_per_s,
            }
        finally:
            if fleet is not None:
                fleet.stop()
            server.stop()


@contextlib.contextmanager
def bench_issuer(tmp: Path) -> Iterator[tuple[str, Path]]:
    """A real `fa-issuer` for one round (tokens per install high enough for re-enrolling fleets) and the app
    backend's key file the fleet signs credentials with."""
    key_file = tmp / "app.key"
    key = new_app_key_file(key_file)
    (tmp / "issuer").mkdir()
    issuer = Issuer(tmp / "issuer", {"fa-sim": bytes(key.verify_key)}, tokens_per_day=10).start()
    try:
        yield issuer.url, key_file
    finally:
        issuer.stop()


def protocol_server_s(n: int) -> float | None:
    """The server's protocol work alone (`secagg.bench`: every party in one process, no HTTP) for the rounds'
    cohort of n parties and 4-entry vectors: what a masked round adds to an unmasked one besides requests."""
    proc = subprocess.run([sys.executable, "-m", "secagg.bench", "--clients", str(n), "--dim", "4", "--bits", "32",
                           "--graph", "sparse", "--json"], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])["server_total_s"]


def verification_rounds(n: int, processes: int) -> dict[str, Any]:
    """The same masked n-device round (the active model, the only one on the wire) with the devices' cohort checks
    off, on (default) and on with identity tokens (an issuer admits the fleet; each device verifies the token of every
    peer it exchanges shares with), side by side in one run; differences per device against the checks off."""
    configs: dict[str, tuple[dict[str, str], dict[str, Any] | None]] = {
        "verify_off": ({}, {"verify_cohort": False}),
        "verify_on": ({}, None),
        "verify_on_tokens": ({}, None),
    }
    rounds = {}
    for name, (server_env, policy) in configs.items():
        rounds[name] = one_round(n, False, processes, checkins=False, validation="none", server_env=server_env,
                                 policy=policy, identities=name == "verify_on_tokens")
        print(f"[bench_http] {name}: {rounds[name]}", file=sys.stderr, flush=True)
    base = rounds["verify_off"]
    added = {}
    for name in ("verify_on", "verify_on_tokens"):
        r = rounds[name]
        added[name] = {
            "device_requests_per_device": round(r["device_requests_per_device"] - base["device_requests_per_device"], 2),
            "device_cpu_ms_per_device": round(r["device_cpu_ms_per_device"] - base["device_cpu_ms_per_device"], 2),
            "server_cpu_ms_per_device": round(r["server_cpu_ms_per_device"] - base["server_cpu_ms_per_device"], 3),
            "round_wall_s": round(r["round_wall_s"] - base["round_wall_s"], 2),
        }
    return {"devices": n, "rounds": rounds, "added_over_verify_off": added}


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--devices", type=int, nargs="*", default=[1000, 5000])
    p.add_argument("--dropout-devices", type=int, default=1000, help="fleet size of the dropout comparison (0: skip)")
    p.add_argument("--dropout", type=float, default=0.10)
    p.add_argument("--big", type=int, default=10_000, help="fleet size of the one large masked round (0: skip)")
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--verify-devices", type=int, default=1000, help="fleet size of the cohort-verification comparison (0: skip)")
    args = p.parse_args()
    runs = []
    masked_by_n: dict[int, dict[str, Any]] = {}
    for n in args.devices:
        masked = one_round(n, False, args.processes, validation="none")
        print(f"[bench_http] {masked}", file=sys.stderr, flush=True)
        plain = one_round(n, True, args.processes, validation="none")
        print(f"[bench_http] {plain}", file=sys.stderr, flush=True)
        masked_by_n[n] = masked
        runs.append({"devices": n, "masked": masked, "unmasked": plain, "ratio": {
            "wall_masked_over_unmasked": ratio(masked["round_wall_s"], plain["round_wall_s"]),
            "server_cpu_masked_over_unmasked": ratio(masked["server_cpu_s"], plain["server_cpu_s"]),
            "device_requests_masked_over_unmasked": ratio(masked["device_requests_per_device"],
                                                          plain["device_requests_per_device"]),
            "server_cpu_per_request_masked_over_unmasked": ratio(masked["server_cpu_ms_per_device_request"],
                                                                 plain["server_cpu_ms_per_device_request"]),
        }, "protocol_server_s": protocol_server_s(n)})
    report: dict[str, Any] = {"http_rounds": runs}
    if args.dropout_devices:
        n = args.dropout_devices
        calm = masked_by_n.get(n) or one_round(n, False, args.processes, checkins=False, validation="none")
        dropping = one_round(n, False, args.processes, dropout=args.dropout, checkins=False, validation="none")
        print(f"[bench_http] {dropping}", file=sys.stderr, flush=True)
        report["dropout_round"] = {
            "devices": n, "dropout": args.dropout, "without_dropout": calm, "with_dropout": dropping,
            "wall_dropout_over_no_dropout": ratio(dropping["round_wall_s"], calm["round_wall_s"]),
        }
    if args.verify_devices:
        report["verification"] = verification_rounds(args.verify_devices, args.processes)
    if args.big:
        big = one_round(args.big, False, args.processes, checkins=False)
        print(f"[bench_http] {big}", file=sys.stderr, flush=True)
        report["big_round"] = big
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
