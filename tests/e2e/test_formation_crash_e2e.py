"""Acceptance for issue 47 with real processes on PostgreSQL: a server process SIGKILLed at each step of storing a
forming cohort (before its claims, after them, after the task's log entry, after the cohort's row, after the commit;
tests/e2e/crashing_server.py kills itself there) leaves the devices to the process that takes its query over.

Process B serves the `fa-sim` devices (they know no other URL); each query is submitted at a new process A, which
leases it, forms its cohort from those devices and dies. B takes the query over once A's lease lapses and completes
it from the same devices — all of them, as the query needs every one. Only under `make test-postgres`."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from analyst_client.cli import AnalystClient
from analytics_server.services.cohorts_service import FORMATION_STEPS
from devstack.pg_local import worker_database
from devstack.processes import Fleet, Server, fresh_database
from tests.e2e.cluster import CLUSTER_ENV

PG_URL = os.environ.get("FA_TEST_POSTGRES_URL")
pytestmark = [pytest.mark.e2e, pytest.mark.postgres]  # collected only with FA_TEST_POSTGRES_URL (conftest.py)
DEVICES = 8
SPEC = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun", "star", "cloud", "rain"]},
        "cohort": {"min_clients": DEVICES, "max_clients": DEVICES, "phase_timeout_s": 8, "formation_timeout_s": 60}}


@pytest.fixture
def pg_url() -> str:
    assert PG_URL is not None
    url = worker_database(PG_URL)
    fresh_database(url)
    return url


@pytest.fixture
def b(pg_url: str, tmp_path: Path) -> Iterator[Server]:
    server = Server(pg_url, tmp_path / "b.log", env=CLUSTER_ENV, name="b").start()
    try:
        yield server
    finally:
        server.stop()
    assert not server.log_has_tracebacks(), (tmp_path / "b.log").read_text()[-5000:]


@pytest.mark.timeout(300)
def test_a_process_killed_at_each_step_of_forming_a_cohort_leaves_the_devices(
        b: Server, pg_url: str, tmp_path: Path) -> None:
    token = b.token("admin")
    at_b = AnalystClient(b.url, token, timeout_s=60)
    fleet = Fleet(b.url, DEVICES, tmp_path, checkin_wait=2)
    try:
        for step in FORMATION_STEPS:
            qid = _submit_where_it_dies(pg_url, tmp_path, token, step, at_b)
            final = at_b.wait(qid, timeout_s=120)
            assert final["status"] == "succeeded", (step, final)
            (contributors,) = at_b.call("GET", f"/v1/admin/queries/{qid}/contributors")["rounds"].values()
            assert sorted(contributors) == sorted(fleet.truth()), step  # every device, once
    finally:
        fleet.stop()


def _submit_where_it_dies(pg_url: str, tmp: Path, token: str, step: str, at_b: AnalystClient) -> str:
    """Start process A, submit the query there and wait until A killed itself at `step`; the query's id. (B looks
    for unleased queries twice a second: should it take the query in the moment before A leases it, it runs it
    and A is given the next one.)"""
    for attempt in range(3):
        a = Server(pg_url, tmp / f"a-{step}-{attempt}.log", env={**CLUSTER_ENV, "FA_DIE_AT": step},
                   name=f"a-{step}", command=[sys.executable, "-m", "tests.e2e.crashing_server"]).start()
        assert a.proc is not None
        qid: str = AnalystClient(a.url, token, timeout_s=60).submit(SPEC)["id"]
        deadline = time.monotonic() + 60
        while a.proc.poll() is None and at_b.status(qid)["status"] in ("pending", "running"):
            assert time.monotonic() < deadline, f"process A neither died at {step} nor let the query finish"
            time.sleep(0.05)
        if a.proc.poll() is not None:
            assert a.proc.returncode == -signal.SIGKILL, a.proc.returncode
            return qid
        a.stop()  # B ran this one
    raise AssertionError(f"process A never held a query to die at {step}")
