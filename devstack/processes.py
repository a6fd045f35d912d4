"""Local process stack for end-to-end tests, the demo and the HTTP benchmark: a real `fa-server serve` on a
database URL (migrated from scratch), `fa-sim` fleets and `fa-issuer` as subprocesses, tokens written by the server's
own store, app backend key files.

Imports nothing from device_sdk: it only starts the console scripts installed next to this interpreter.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from alembic import command
from nacl.signing import SigningKey

from analytics_server.db.engine import alembic_config, make_engine, migrate, settle_driver_threads
from analytics_server.db.store import Store
from fa_common.b64 import b64e
from fa_common.keyfile import write_seed
from fa_issuer.attesters import new_app_key

BIN = Path(sys.executable).parent
SERVER_ENV = {
    "FA_RETRY_AFTER_S": "1",
    "FA_COHORT_FORMATION_WAIT_S": "1.5",
    "FA_CHECKIN_MAX_WAIT_S": "5",
    "FA_REGISTER_RATE_PER_MIN": "0",  # whole simulated fleets register from 127.0.0.1, also in production profile
    "FA_SPEC_CHECK_TIMEOUT_S": "60",  # the 5 s default guards a server's CPU; a busy test machine can hit it
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def free_port_run(n: int) -> int:
    """The first of `n` consecutive free ports, below Linux's ephemeral range (32768-60999), so an outgoing
    connection (to the database, say) cannot take one of them before the server binds it."""
    rng = random.SystemRandom()
    for _ in range(200):
        base = rng.randrange(20000, 32000 - n)
        try:
            with contextlib.ExitStack() as stack:
                for port in range(base, base + n):
                    s = stack.enter_context(socket.socket())
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError(f"no run of {n} free ports found")


def fresh_database(url: str) -> None:
    """Migrate `url` from scratch (PostgreSQL databases are reused between tests: downgrade first)."""
    if url.startswith("postgresql"):
        command.downgrade(alembic_config(url), "base")
    migrate(url)


def create_token(db_url: str, role: str) -> str:
    """A bearer token of `role`, stored as `fa-server token create` stores it (`Store.create_token`) but without
    starting a Python process (~1 s of CPU) per token. Runs on its own thread: the caller may be inside an event
    loop (Playwright's sync API)."""

    async def create() -> str:
        engine = make_engine(db_url)
        try:
            return await Store(engine).tokens.create(role)
        finally:
            await engine.dispose()
            await settle_driver_threads()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, create()).result()


def cli(*args: str, env: dict[str, str] | None = None) -> str:
    out = subprocess.run([str(BIN / args[0]), *args[1:]], capture_output=True, text=True, env={**os.environ, **(env or {})},
                         timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"{args} failed ({out.returncode}): {out.stderr[-2000:]}")
    return out.stdout


def terminate(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM a child process still running and wait for it; SIGKILL after `grace_s`."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def wait_healthy(proc: subprocess.Popen[bytes], url: str, log_path: Path, what: str, timeout_s: float) -> None:
    """Until `url`/healthz answers 200; RuntimeError (with the log's end) if the process exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}: {log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not become healthy")


class Server:
    """One `fa-server serve` process. With `name` it is a member of a cluster (processes sharing one
    PostgreSQL database): it advertises its own URL to devices and carries `name` as its process label. With
    `command` (an argv prefix taking `fa-server`'s arguments, e.g. `[sys.executable, "-m", "some.module"]`) another
    entry point is started in its place (tests/e2e/malicious_server.py)."""

    def __init__(self, db_url: str, log_path: Path, env: dict[str, str] | None = None, name: str | None = None,
                 command: list[str] | None = None) -> None:
        self.db_url = db_url
        self.command = list(command) if command else [str(BIN / "fa-server")]
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        member = {"FA_ADVERTISE_URL": self.url, "FA_PROCESS_NAME": name} if name else {}
        self.env = {**os.environ, **SERVER_ENV, **member, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Server:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [*self.command, "serve", "--db", self.db_url, "--port", str(self.port)],
            stdout=log, stderr=subprocess.STDOUT, env=self.env,
        )
        wait_healthy(self.proc, self.url, self.log_path, "server", 30)
        return self

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None:
            terminate(self.proc, 15)

    def log_has_tracebacks(self) -> bool:
        return "Traceback" in self.log_path.read_text(errors="replace")

    def token(self, role: str = "analyst") -> str:
        return create_token(self.db_url, role)


class Fleet:
    """`fa-sim` as a subprocess. `server_url`: one URL or several (processes sharing a database); with `split`
    the devices are spread over them by hand instead of all starting at the first."""

    def __init__(self, server_url: str | list[str], n: int, tmp: Path, scenario: str = "words", dropout: float = 0.0,
                 seed: int = 1, checkin_wait: float = 3.0, extra: list[str] | None = None,
                 env: dict[str, str] | None = None, split: bool = False) -> None:
        self.truth_path = tmp / f"truth-{seed}.json"
        self.log = open(tmp / f"fleet-{seed}.log", "ab")
        servers = server_url if isinstance(server_url, str) else ",".join(server_url)
        args = [str(BIN / "fa-sim"), "--server", servers, "--devices", str(n), "--scenario", scenario,
                "--dropout", str(dropout), "--seed", str(seed), "--truth-file", str(self.truth_path),
                "--checkin-wait", str(checkin_wait), *(["--split-servers"] if split else []), *(extra or [])]
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        deadline = time.monotonic() + 120
        while not self.truth_path.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("fa-sim did not start")
            time.sleep(0.1)

    def truth(self) -> dict[str, dict[str, list[Any]]]:
        devices: dict[str, dict[str, list[Any]]] = json.loads(self.truth_path.read_text())["devices"]
        return devices

    def stop(self) -> None:
        terminate(self.proc, 20)
        self.log.close()


class Issuer:
    """One `fa-issuer serve` process (fa_issuer, docs/issuer.md) with its own key file and database in `workdir`,
    admitting credentials of the app backends in `apps` (name → Ed25519 public key). Started as
    `python -m fa_issuer.cli` with this interpreter (the console script `fa-issuer` runs the same `main`).

    `rate_per_min`: token requests per minute per address; none by default, because a simulated fleet's devices
    all come from 127.0.0.1 (as the server's FA_REGISTER_RATE_PER_MIN is 0 in SERVER_ENV): the issuer's default
    of 60 would enrol a 1,000-device fleet at one device a second."""

    def __init__(self, workdir: Path, apps: dict[str, bytes], tokens_per_day: int = 1,
                 extra: list[str] | None = None, env: dict[str, str] | None = None, rate_per_min: float = 0) -> None:
        self.workdir = workdir
        self.key_path = workdir / "issuer-key.pem"
        self.db_path = workdir / "issuer.db"
        self.log_path = workdir / "issuer.log"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.command = [sys.executable, "-m", "fa_issuer.cli"]
        self.apps = dict(apps)
        self.tokens_per_day = tokens_per_day
        self.extra = ["--rate-per-min", f"{rate_per_min:g}", *(extra or [])]
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Issuer:
        """Create the key on first start (kept across restarts), start the process, wait for /healthz."""
        if not self.key_path.exists():
            out = subprocess.run([*self.command, "keygen", "--key", str(self.key_path)], capture_output=True, text=True,
                                 env=self.env, timeout=120)
            if out.returncode != 0:
                raise RuntimeError(f"fa-issuer keygen failed ({out.returncode}): {out.stderr[-2000:]}")
        apps = [arg for name, key in self.apps.items() for arg in ("--app", f"{name}={b64e(key)}")]
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [*self.command, "serve", "--key", str(self.key_path), "--db", str(self.db_path), "--port", str(self.port),
             "--tokens-per-day", str(self.tokens_per_day), *apps, *self.extra],
            stdout=log, stderr=subprocess.STDOUT, env=self.env,
        )
        wait_healthy(self.proc, self.url, self.log_path, "issuer", 60)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            terminate(self.proc, 15)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


def new_app_key_file(path: Path) -> SigningKey:
    """A new app backend key written to `path` as `fa-issuer app-key --out` writes it (mode 0600): the key fa-sim
    (`--app-key`, FA_APP_KEY_FILE) signs its enrolment credentials with; `Issuer(apps=…)` takes its `verify_key`."""
    key = new_app_key()
    write_seed(path, bytes(key))
    return key
