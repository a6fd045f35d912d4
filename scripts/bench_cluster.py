"""Scale-out benchmark (`make bench`): 1, 2 and 3 server processes on one throw-away PostgreSQL database.

For each process count: check-ins per second the processes answered together while a fleet polled without
long-polling (with the SQL statements and PostgreSQL CPU per check-in); one histogram round over the whole fleet (devices split across the processes' URLs by hand,
each long-polling as real devices do): wall time from submit to result, server CPU seconds (all processes)
and PostgreSQL CPU seconds during the round, per device, and SQL statements the processes sent per device
in that round. All processes, the database and the simulated fleet share this machine's cores, so the
figures show the coordination's cost, not a speed-up. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
from analyst_client.cli import AnalystClient
from devstack.pg_local import local_postgres, postgres_cpu_seconds
from devstack.processes import Fleet, Server, fresh_database
from scripts.bench_http import AVAILABILITY_LAPSE_S, cpu_seconds, metric

BUCKETS = ["moon", "sun", "star", "cloud"]


def total(urls: list[str], name: str) -> float:
    return sum(metric(u, name) for u in urls)


def one(pg_url: str, processes: int, n: int) -> dict[str, Any]:
    fresh_database(pg_url)
    with tempfile.TemporaryDirectory(prefix="fa-bench-cluster-") as tmp_s:
        tmp = Path(tmp_s)
        servers: list[Server] = []
        fleet = None
        try:
            for i in range(processes):
                env = {"FA_RETRY_AFTER_S": "0.2", "FA_COHORT_FORMATION_WAIT_S": "2"}
                servers.append(Server(pg_url, tmp / f"server{i}.log", env=env, name=f"p{i}").start())
            urls = [s.url for s in servers]
            admin = AnalystClient(urls[0], servers[0].token("admin"), timeout_s=120)
            live = [p for p in admin.call("GET", "/v1/cluster")["processes"] if p["live"]]
            assert len(live) == processes, live
            # 1) check-ins/s: the fleet polls without long-polling for a fixed window
            fleet = Fleet(urls, n, tmp, seed=1, checkin_wait=0, extra=["--processes", "2"], split=True)
            deadline = time.monotonic() + 600
            while total(urls, "fa_device_checkins_total") < 2 * n and time.monotonic() < deadline:
                time.sleep(0.5)
            c0, t0 = total(urls, "fa_device_checkins_total"), time.monotonic()
            s0, d0 = total(urls, "fa_db_statements_total"), postgres_cpu_seconds()
            time.sleep(5)
            checkins = total(urls, "fa_device_checkins_total") - c0
            checkins_per_s = checkins / (time.monotonic() - t0)
            statements_per_checkin = (total(urls, "fa_db_statements_total") - s0) / max(1.0, checkins)
            db_ms_per_checkin = 1000 * (postgres_cpu_seconds() - d0) / max(1.0, checkins)
            fleet.stop()
            time.sleep(AVAILABILITY_LAPSE_S)
            # 2) one round with the fleet long-polling
            fleet = Fleet(urls, n, tmp, seed=2, checkin_wait=10, extra=["--processes", "2"], split=True)
            c1 = total(urls, "fa_device_checkins_total")
            while total(urls, "fa_device_checkins_total") < c1 + n and time.monotonic() < deadline:
                time.sleep(0.5)
            spec = {"kind": "histogram", "source": "words", "params": {"buckets": BUCKETS},
                    "cohort": {"min_clients": int(n * 0.9), "max_clients": n, "phase_timeout_s": 300}}
            pids = [s.proc.pid for s in servers if s.proc is not None]
            cpu0, db0 = sum(cpu_seconds(p) for p in pids), postgres_cpu_seconds()
            st0 = total(urls, "fa_db_statements_total")
            start = time.perf_counter()
            qid = admin.submit(spec)["id"]
            final = admin.wait(qid, timeout_s=1800, poll_s=0.2)
            wall = time.perf_counter() - start
            cpu = sum(cpu_seconds(p) for p in pids) - cpu0
            db_cpu = postgres_cpu_seconds() - db0
            statements = total(urls, "fa_db_statements_total") - st0
            clients = admin.result(qid)["result"].get("clients") if final["status"] == "succeeded" else None
            return {
                "processes": processes,
                "devices": n,
                "status": final["status"],
                "clients": clients,
                "checkins_per_s": round(checkins_per_s, 1),
                "db_statements_per_checkin": round(statements_per_checkin, 2),
                "db_cpu_ms_per_checkin": round(db_ms_per_checkin, 3),
                "round_wall_s": round(wall, 2),
                "server_cpu_s": round(cpu, 2),
                "server_cpu_ms_per_device": round(1000 * cpu / n, 3),
                "db_cpu_s": round(db_cpu, 2),
                "db_cpu_ms_per_device": round(1000 * db_cpu / n, 3),
                "db_statements_per_device_round": round(statements / n, 2),
            }
        finally:
            if fleet is not None:
                fleet.stop()
            for s in servers:
                s.stop()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--devices", type=int, default=5000)
    p.add_argument("--processes", type=int, nargs="+", default=[1, 2, 3])
    args = p.parse_args()
    runs = []
    with local_postgres() as url:
        for k in args.processes:
            r = one(url, k, args.devices)
            print(f"[bench_cluster] {r}", file=sys.stderr, flush=True)
            runs.append(r)
    print(json.dumps({"cluster": {"devices": args.devices, "runs": runs}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
