"""PostgreSQL for tests and benchmarks (Debian's `postgresql` package; `make test-postgres` installs it).

`with local_postgres() as url:` gives a `postgresql+asyncpg://` URL to an empty database of a throw-away local cluster
and removes the cluster afterwards; `worker_database(url)` gives each pytest-xdist worker a database of its own on
the cluster `make test-postgres` started (tests migrate theirs from scratch, so workers must not share one)."""

from __future__ import annotations

import asyncio
import functools
import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import asyncpg
from sqlalchemy.engine import make_url

from devstack.processes import free_port


def pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name))
    return Path(found[-1]) if found else None


@contextmanager
def local_postgres(max_connections: int = 300) -> Iterator[str]:
    binaries = pg_bin()
    if binaries is None:
        raise RuntimeError("PostgreSQL is not installed (run `make test-postgres` once: it installs Debian's package)")
    data = Path(tempfile.mkdtemp(prefix="fa-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root
        shutil.chown(data, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    port = free_port()

    def run(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([*as_user, *args], check=True, capture_output=True, timeout=120)

    try:
        run(str(binaries / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres")
        run(str(binaries / "pg_ctl"), "-D", str(data), "-l", str(data / "server.log"), "-w", "-o",
            f"-p {port} -k {data} -c listen_addresses=127.0.0.1 -c max_connections={max_connections} -c fsync=off", "start")
        run(str(binaries / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "fa_bench")
        yield f"postgresql+asyncpg://postgres@127.0.0.1:{port}/fa_bench"
    finally:
        subprocess.run([*as_user, str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                       capture_output=True, timeout=60)
        shutil.rmtree(data, ignore_errors=True)


def postgres_cpu_seconds() -> float:
    """CPU seconds of the machine's PostgreSQL processes (postmaster, backends, and backends that exited —
    counted in their parent's children time). Run benchmarks alone: other clusters would be counted too."""
    clk = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if not (proc / "cmdline").read_bytes().split(b"\0")[0].startswith(b"postgres"):
                if "postgres" not in (proc / "comm").read_text():
                    continue
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15]) / clk  # utime, stime, cutime, cstime
        except (OSError, ValueError, IndexError):
            continue
    return total


@functools.cache
def worker_database(url: str) -> str:
    """`url` itself outside pytest-xdist; under it, the same cluster's database `<name>_<worker>` (created on first
    use)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return url
    parsed = make_url(url)
    name = f"{parsed.database}_{worker}"

    async def create() -> None:
        conn = await asyncpg.connect(host=parsed.host, port=parsed.port, user=parsed.username,
                                     password=parsed.password, database=parsed.database)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        except asyncpg.DuplicateDatabaseError:
            pass
        finally:
            await conn.close()

    with ThreadPoolExecutor(max_workers=1) as pool:  # the caller may be inside an event loop
        pool.submit(asyncio.run, create()).result()
    return parsed.set(database=name).render_as_string(hide_password=False)
