"""Acceptance (scale-out): three server processes on one PostgreSQL database, with and without a real HAProxy
in front; the process running the histogram query is killed with SIGKILL mid-phase; both queries finish,
the histogram exactly over its contributors, every contribution counted once, the training query's privacy
charge made once; server-sent events keep streaming through the balancer from a surviving process. Plus
budget charges and replay checks raced across the processes.

Collected only under `make test-postgres` (tests/e2e/conftest.py ignores this module without
FA_TEST_POSTGRES_URL).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from analyst_client.cli import AnalystClient, ApiError
from devstack.pg_local import worker_database
from devstack.processes import BIN
from fa_common.b64 import b64e
from tests.e2e.cluster import Cluster, HAProxy, sse_events
from tests.e2e.harness import SERVER_ENV, Fleet, SyncDevice, audit_clean, check_exact, cli, free_port, free_port_run, fresh_database
from tests.e2e.test_training_e2e import training_spec

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

MID_PHASE = ("advertise_keys", "share_keys", "masked_input")
HIST = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun", "star", "cloud", "rain"]},
        "cohort": {"min_clients": 150, "max_clients": 300, "phase_timeout_s": 8}}


@pytest.fixture
def pg_url() -> str:
    url = worker_database(os.environ["FA_TEST_POSTGRES_URL"])
    fresh_database(url)
    return url


@pytest.fixture
def cluster(pg_url: str, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(pg_url, tmp_path).start()
    try:
        yield c
    finally:
        c.stop()


def _scaling() -> dict[str, Any]:
    from fleet_sim.scenarios.datasets import breast_cancer_split

    sp = breast_cancer_split()
    mean, std = sp.X_train.mean(axis=0), sp.X_train.std(axis=0)
    return {n: {"mean": float(m), "std": float(s)} for n, m, s in zip(sp.feature_names, mean, std)}


def _train_spec() -> dict[str, Any]:
    spec = training_spec(_scaling(), rounds=3, dp=True)
    spec["cohort"] = {"min_clients": 40, "max_clients": 50, "phase_timeout_s": 8}
    return spec


def _kill_lease_holder_mid_phase(cluster: Cluster, admin: AnalystClient, qid: str) -> str:
    """SIGKILL the process holding the query's lease while one of its cohorts is in a phase before the sum is
    known (watched on that process itself, whose progress is live rather than a heartbeat old)."""
    victim = cluster.lease_holder(admin, qid)
    watch = AnalystClient(victim.url, admin.token)
    deadline = time.monotonic() + 180
    while True:
        status = watch.status(qid)
        if status["progress"]["phase"] in MID_PHASE:
            break
        assert status["status"] in ("pending", "running"), status
        assert time.monotonic() < deadline, f"no cohort reached {MID_PHASE}: {status}"
        time.sleep(0.01)
    victim.kill9()
    return victim.url


def _scenario(cluster: Cluster, tmp: Path, device_urls: list[str], split: bool, analyst_urls: list[str]) -> None:
    admin_token = cluster.servers[0].token("admin")
    admin = AnalystClient(analyst_urls, admin_token, timeout_s=60)
    words = Fleet(device_urls, 300, tmp, seed=11, checkin_wait=3, extra=["--processes", "2"], split=split)
    bc = Fleet(device_urls, 50, tmp, scenario="breast_cancer_train", seed=12, checkin_wait=3, split=split)
    stream: list[dict[str, Any]] = []
    try:
        train_spec = _train_spec()
        hist = admin.submit(HIST)["id"]
        train = admin.submit(train_spec)["id"]
        reader = threading.Thread(target=sse_events, args=(analyst_urls, f"/v1/queries/{hist}/events", admin_token, stream),
                                  daemon=True)
        reader.start()
        killed = _kill_lease_holder_mid_phase(cluster, admin, hist)
        killed_at = len(stream)
        final = {q: admin.wait(q, timeout_s=300) for q in (hist, train)}
        assert {q: f["status"] for q, f in final.items()} == {hist: "succeeded", train: "succeeded"}, final
        new_holder = [p for p in admin.call("GET", "/v1/cluster")["processes"] if p["url"] == killed]
        assert new_holder and not new_holder[0]["live"]  # the killed process is listed as gone
        # the histogram: exact over its contributors, from both fleets (check_exact also refuses a device
        # counted twice)
        check_exact(admin, hist, HIST, {**words.truth(), **bc.truth()})
        cohorts = admin.status(hist)["progress"]["cohorts"]
        assert cohorts.get("aborted", 0) >= 1 and cohorts.get("finished", 0) >= 1, cohorts
        # the training query: every round's sum over distinct devices, each round's count as released
        rounds = admin.call("GET", f"/v1/admin/queries/{train}/contributors")["rounds"]
        assert sorted(rounds) == ["0", "1", "2"]
        for ids in rounds.values():
            assert len(ids) == len(set(ids)) >= train_spec["cohort"]["min_clients"]
        budget = admin.call("GET", "/v1/budgets/examples")
        assert budget["queries_charged"] == 1 and budget["spent_epsilon"] == pytest.approx(8.0), budget
        reader.join(60)
        assert stream and stream[-1]["event"] == "end" and stream[-1]["data"]["status"] == "succeeded", stream[-3:]
        after = [e for e in stream[killed_at:] if e["event"] not in ("reconnect",)]
        assert any(e["event"] == "cohort.finished" for e in after), "no event streamed after the kill"
        assert not cluster.tracebacks()
        # three processes appended to one log, one was killed mid-phase: every process serves the same honest log
        for live in cluster.live():
            audit_clean(live.url, admin_token)
    finally:
        words.stop()
        bc.stop()


def test_lease_holder_killed_behind_haproxy(cluster: Cluster, tmp_path: Path) -> None:
    lb = HAProxy(cluster.urls, tmp_path)
    try:
        _scenario(cluster, tmp_path, [lb.url], split=False, analyst_urls=[lb.url])
    finally:
        lb.stop()


def test_lease_holder_killed_devices_split_by_hand(cluster: Cluster, tmp_path: Path) -> None:
    _scenario(cluster, tmp_path, cluster.urls, split=True, analyst_urls=cluster.urls)


def test_budget_charges_race_across_processes(cluster: Cluster) -> None:
    """A source with budget for exactly 3 queries; 9 submits at once spread over the 3 processes → 3 accepted."""
    admin_token = cluster.servers[0].token("admin")
    AnalystClient(cluster.urls[0], admin_token).call("PUT", "/v1/admin/budgets/race", {"epsilon": 3.0, "delta": 1e-5})
    spec = {**HIST, "source": "race", "privacy": {"mechanism": "discrete_gaussian", "epsilon": 1.0, "delta": 1e-6}}
    clients = [AnalystClient(u, admin_token) for u in cluster.urls]
    barrier = threading.Barrier(9)

    def submit(i: int) -> int:
        barrier.wait()
        try:
            clients[i % 3].submit(spec)
            return 201
        except ApiError as exc:
            assert "budget" in exc.message, exc.message
            return exc.status

    with concurrent.futures.ThreadPoolExecutor(9) as pool:
        statuses = list(pool.map(submit, range(9)))
    assert statuses.count(201) == 3, statuses
    budget = clients[1].call("GET", "/v1/budgets/race")
    assert budget["queries_charged"] == 3 and budget["spent_epsilon"] == pytest.approx(3.0), budget


def test_a_replayed_request_is_accepted_by_one_process_only(cluster: Cluster) -> None:
    """One signed registration sent at once to all three processes: exactly one is accepted, the others are
    refused as replays (the nonce is claimed in the shared database before acting)."""
    for attempt in range(5):  # each attempt races a fresh request; all must end with exactly one acceptance
        device = SyncDevice(cluster.urls[0])
        body = json.dumps({"public_key": b64e(device.public)}).encode()
        headers = {**device.signed_headers("POST", "/v1/device/register", body, False), "Content-Type": "application/json"}
        barrier = threading.Barrier(3)

        def send(url: str) -> int:
            d = SyncDevice(url)
            barrier.wait()
            return d.raw("POST", "/v1/device/register", body, headers)[0]

        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            statuses = sorted(pool.map(send, cluster.urls))
        assert statuses.count(201) == 1 and all(s in (201, 401, 409) for s in statuses), (attempt, statuses)


def _healthz(url: str) -> int:
    with urllib.request.urlopen(url + "/healthz", timeout=5) as r:
        return int(json.loads(r.read())["process"]["pid"])


def _until(check: Any, log: Path, timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            got = check()
            if got:
                return got
        except OSError:
            pass
        assert time.monotonic() < deadline, "timed out; the workers' log ends:\n" + log.read_text()[-4000:]
        time.sleep(0.2)


def test_workers_share_a_port_and_are_restarted(pg_url: str, tmp_path: Path) -> None:
    """`fa-server serve --workers 2`: both answer on the shared port, each on its private (advertised) port;
    a worker killed with SIGKILL is restarted; SIGTERM to the supervisor stops them all."""
    port, base = free_port(), free_port_run(2)
    log_path = tmp_path / "workers.log"
    log = open(log_path, "ab")
    sup = subprocess.Popen([str(BIN / "fa-server"), "serve", "--db", pg_url, "--port", str(port), "--workers", "2",
                            "--worker-ports", str(base)], stdout=log, stderr=subprocess.STDOUT,
                           env={**os.environ, **SERVER_ENV})
    shared = f"http://127.0.0.1:{port}"
    private = [f"http://127.0.0.1:{base}", f"http://127.0.0.1:{base + 1}"]
    try:
        pids = [_until(lambda u=u: _healthz(u), log_path) for u in private]
        assert len(set(pids)) == 2
        seen = _until(lambda: {_healthz(shared) for _ in range(40)} == set(pids) or None, log_path)
        assert seen
        admin = AnalystClient(shared, cli("fa-server", "token", "create", "--role", "admin", "--db", pg_url).strip())
        urls = _until(lambda: sorted(p["url"] for p in admin.call("GET", "/v1/cluster")["processes"] if p["live"]) == private, log_path)
        assert urls
        os.kill(pids[0], signal.SIGKILL)
        restarted = _until(lambda: (pid := _healthz(private[0])) != pids[0] and pid, log_path)
        assert restarted not in pids
        sup.send_signal(signal.SIGTERM)
        assert sup.wait(30) == 0
        for u in private + [shared]:
            with pytest.raises(OSError):
                _healthz(u)
    finally:
        if sup.poll() is None:
            sup.kill()
            sup.wait(10)
        log.close()
