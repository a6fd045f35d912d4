"""Many server processes on one PostgreSQL database, optionally behind a real HAProxy (Debian's package,
installed by scripts/test_postgres.sh): start, find a query's lease holder, kill one."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from analyst_client.cli import AnalystClient
from devstack.processes import Server, free_port, terminate

CLUSTER_ENV = {"FA_LEASE_TTL_S": "3", "FA_HEARTBEAT_S": "0.5", "FA_COHORT_FORMATION_WAIT_S": "1.0"}
"""Short leases so a killed process's queries are taken over within seconds."""


class Cluster:
    def __init__(self, db_url: str, tmp: Path, n: int = 3, env: dict[str, str] | None = None) -> None:
        self.servers = [Server(db_url, tmp / f"server{i}.log", env={**CLUSTER_ENV, **(env or {})}, name=f"p{i}")
                        for i in range(n)]

    def start(self) -> Cluster:
        for s in self.servers:
            s.start()
        return self

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def live(self) -> list[Server]:
        return [s for s in self.servers if s.proc is not None and s.proc.poll() is None]

    def lease_holder(self, admin: AnalystClient, query_id: str, timeout_s: float = 30) -> Server:
        """The process running `query_id` (from GET /v1/cluster)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for p in admin.call("GET", "/v1/cluster")["processes"]:
                if p["live"] and query_id in p["leases"]:
                    return next(s for s in self.servers if s.url == p["url"])
            time.sleep(0.1)
        raise AssertionError(f"no live process holds query {query_id}")

    def stop(self) -> None:
        for s in self.servers:
            s.stop()

    def tracebacks(self) -> list[str]:
        return [str(s.log_path) for s in self.servers if s.log_has_tracebacks()]


class HAProxy:
    """HAProxy in front of `backends`: round robin, no stickiness, health checks on /healthz."""

    def __init__(self, backends: list[str], tmp: Path) -> None:
        binary = shutil.which("haproxy")
        if binary is None:
            raise RuntimeError("haproxy is not installed (scripts/test_postgres.sh installs Debian's package)")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        servers = "\n".join(
            f"    server s{i} {b.removeprefix('http://')} check inter 500ms fall 2 rise 1" for i, b in enumerate(backends)
        )
        self.config = tmp / "haproxy.cfg"
        self.config.write_text(f"""global
    maxconn 4000
defaults
    mode http
    timeout connect 2s
    timeout client 120s
    timeout server 120s
    timeout http-keep-alive 10s
    option redispatch
    retries 2
frontend fa
    bind 127.0.0.1:{self.port}
    default_backend servers
backend servers
    balance roundrobin
    option httpchk GET /healthz
{servers}
""")
        self.log = open(tmp / "haproxy.log", "ab")
        self.proc = subprocess.Popen([binary, "-f", str(self.config), "-db"], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"haproxy did not start: {(tmp / 'haproxy.log').read_text()[-2000:]}")

    def stop(self) -> None:
        terminate(self.proc, 10)
        self.log.close()


def sse_events(urls: list[str], path: str, token: str, out: list[dict[str, Any]], timeout_s: float = 300) -> None:
    """Follow a server-sent event stream to its `end` as a browser does: when the connection breaks (its
    process died) reconnect — to the next of `urls` — with `Last-Event-ID`, so only what was missed is sent
    again. Appends {"event", "data", "id"} to `out`, and {"event": "reconnect"} at each reconnection."""
    last_id: str | None = None
    turn = 0
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
        if last_id is not None:
            headers["Last-Event-ID"] = last_id
        event: dict[str, Any] = {}
        try:
            url = urls[turn % len(urls)]
            with urllib.request.urlopen(urllib.request.Request(url + path, headers=headers), timeout=30) as r:
                for raw in r:
                    line = raw.decode().rstrip("\n")
                    if not line:
                        if event:
                            out.append(event)
                            if event.get("event") == "end":
                                return
                        event = {}
                    elif line.startswith("id:"):
                        event["id"] = last_id = line[3:].strip()
                    elif line.startswith("event:"):
                        event["event"] = line[6:].strip()
                    elif line.startswith("data:"):
                        event["data"] = json.loads(line[5:].strip() or "null")
        except OSError:
            pass
        out.append({"event": "reconnect"})
        turn += 1
        time.sleep(0.5)
