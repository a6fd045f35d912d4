"""`fa-server serve --workers N`: N server processes on one machine sharing the port (docs/scaling.md).

Each worker is an ordinary `fa-server serve` process on the same PostgreSQL database: it listens on the
shared port (SO_REUSEPORT: the kernel spreads connections over the workers) and on its own private port,
which it advertises to devices for the cohorts it runs (they must reach that worker, not any worker).
The supervisor forwards SIGTERM/SIGINT, restarts a worker that dies unexpectedly (with back-off), and
exits when every worker has stopped.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

from analytics_server.cluster import WILDCARD_HOSTS
from analytics_server.settings import Settings

log = logging.getLogger(__name__)
BACKOFF_START_S = 1.0
BACKOFF_CAP_S = 30.0
STOP_WAIT_S = 20.0


class WorkersRefused(Exception):
    """`--workers` cannot be used with these settings (the message says why and what to do)."""


@dataclass
class Worker:
    index: int
    port: int
    url: str
    proc: subprocess.Popen[bytes] | None = None
    backoff: float = BACKOFF_START_S
    restart_at: float = 0.0
    started: float = field(default_factory=time.monotonic)


def check(settings: Settings, workers: int) -> None:
    if settings.db_url.startswith("sqlite"):
        raise WorkersRefused(
            "--workers needs PostgreSQL: SQLite allows one writing process, so the embedded SQLite server runs as a "
            "single process; use --db postgresql+asyncpg://USER@HOST/DB for several workers"
        )
    if settings.advertise_url and workers > 1:
        raise WorkersRefused("--advertise-url names one process; with --workers each worker advertises its own "
                             "private port (--worker-ports)")


def _advertised_host(host: str) -> str:
    return socket.gethostname() if host in WILDCARD_HOSTS else host


def run_workers(settings: Settings, workers: int, worker_ports: int | None, db_url: str) -> int:
    check(settings, workers)
    base = worker_ports if worker_ports is not None else settings.port + 1
    host = _advertised_host(settings.host)
    pool = [Worker(i, base + i, f"http://{host}:{base + i}") for i in range(workers)]
    stopping = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for w in pool:
            if w.proc is not None and w.proc.poll() is None:
                w.proc.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for w in pool:
        _start(w, settings, db_url)
    print(f"fa-server: {workers} workers on {settings.host}:{settings.port}: "
          + ", ".join(f"pid {w.proc.pid if w.proc else '?'} at {w.url}" for w in pool), flush=True)
    while not stopping:
        time.sleep(0.2)
        for w in pool:
            if stopping or w.proc is None or w.proc.poll() is None:
                continue
            now = time.monotonic()
            if w.restart_at == 0.0:
                w.backoff = BACKOFF_START_S if now - w.started > 60 else min(BACKOFF_CAP_S, w.backoff * 2)
                w.restart_at = now + w.backoff
                log.warning("worker %d (pid %d) exited with %s; restarting in %.0f s", w.index, w.proc.pid,
                            w.proc.returncode, w.backoff)
            elif now >= w.restart_at:
                w.restart_at = 0.0
                _start(w, settings, db_url)
                log.warning("worker %d restarted as pid %d", w.index, w.proc.pid if w.proc else -1)
    deadline = time.monotonic() + STOP_WAIT_S
    for w in pool:
        if w.proc is None:
            continue
        try:
            w.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            w.proc.kill()
            w.proc.wait(5)
    return 0


def _start(w: Worker, settings: Settings, db_url: str) -> None:
    env = {**os.environ, "FA_ADVERTISE_URL": w.url}
    if not settings.process_name:
        env["FA_PROCESS_NAME"] = f"{socket.gethostname()}:w{w.index}"
    cmd = [sys.executable, "-m", "analytics_server.cli", "serve", "--db", db_url, "--host", settings.host,
           "--port", str(settings.port), "--shared-port", "--private-port", str(w.port)]
    w.proc = subprocess.Popen(cmd, env=env)
    w.started = time.monotonic()
