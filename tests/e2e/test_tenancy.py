"""Acceptance over real HTTP: analyst tenancy (own queries only), per-analyst ε quota and active-query cap, the
cohort-formation deadline, the consecutive-abort limit, and the refund rule (refunded only while no
masked-input phase of the query has closed), each against a real `fa-server` process."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from analyst_client.cli import AnalystClient, ApiError
from tests.e2e.harness import Server, SyncDevice, client_session

pytestmark = pytest.mark.e2e


def _spec(source: str, epsilon: float | None = None, **cohort: Any) -> dict[str, Any]:
    privacy = {"mechanism": "none"} if epsilon is None else {"mechanism": "skellam", "epsilon": epsilon, "delta": 1e-6}
    return {"kind": "histogram", "source": source, "params": {"buckets": ["moon", "sun"]}, "privacy": privacy,
            "cohort": {"min_clients": 10, "max_clients": 100, **cohort}}


@pytest.fixture
def start(db_url: str, tmp_path: Path) -> Iterator[Any]:
    servers: list[Server] = []

    def _start(**env: str) -> Server:
        srv = Server(db_url, tmp_path / "server.log", env={"FA_COHORT_FORMATION_WAIT_S": "0.2", **env}).start()
        servers.append(srv)
        return srv

    yield _start
    for srv in servers:
        srv.stop()
        assert not srv.log_has_tracebacks(), (tmp_path / "server.log").read_text()[-5000:]


def _status(fn: Any) -> tuple[int, str]:
    try:
        fn()
    except ApiError as exc:
        return exc.status, exc.message
    return 200, ""


def _events_status(srv: Server, token: str, qid: str) -> int:
    req = urllib.request.Request(f"{srv.url}/v1/queries/{qid}/events", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_analysts_see_and_cancel_only_their_own_queries(start: Any) -> None:
    srv = start()
    ta, tb = srv.token("analyst"), srv.token("analyst")
    a, b, admin = AnalystClient(srv.url, ta), AnalystClient(srv.url, tb), AnalystClient(srv.url, srv.token("admin"))
    qa = a.submit(_spec("words"))["id"]
    qb = b.submit(_spec("words"))["id"]
    assert [q["id"] for q in a.call("GET", "/v1/queries")["queries"]] == [qa]
    assert [q["id"] for q in b.call("GET", "/v1/queries")["queries"]] == [qb]
    for fn in (lambda: b.status(qa), lambda: b.result(qa), lambda: b.cancel(qa)):
        status, message = _status(fn)
        assert status == 404 and "unknown query id" in message, (status, message)
    assert _events_status(srv, tb, qa) == 404
    assert a.status(qa)["status"] in ("pending", "running")  # B's cancel did nothing
    # admins see and cancel everyone's queries
    assert {q["id"] for q in admin.call("GET", "/v1/queries")["queries"]} == {qa, qb}
    assert admin.status(qa)["id"] == qa
    assert admin.cancel(qa)["status"] == "cancelled"
    assert a.status(qa)["status"] == "cancelled"
    assert b.cancel(qb)["status"] == "cancelled"


def test_active_query_cap_and_analyst_epsilon_quota(start: Any) -> None:
    """Five pending ε = 2 queries of one analyst used to lock a source's default budget (10) for everyone."""
    srv = start(FA_ANALYST_EPSILON_QUOTA="4", FA_MAX_ACTIVE_QUERIES_PER_ANALYST="3")
    ta = srv.token("analyst")
    a, b, admin = AnalystClient(srv.url, ta), AnalystClient(srv.url, srv.token("analyst")), AnalystClient(srv.url, srv.token("admin"))
    first = a.submit(_spec("words", 2.0))["id"]
    a.submit(_spec("words", 2.0))
    status, message = _status(lambda: a.submit(_spec("words", 2.0)))
    assert status == 422 and "analyst_epsilon_quota" in message and "remaining" in message, message
    b.submit(_spec("words", 2.0))  # the source still has room for other analysts
    assert a.call("GET", "/v1/budgets/words")["spent_epsilon"] == 6.0
    a.submit(_spec("words"))  # no noise, no charge: the third active query
    status, message = _status(lambda: a.submit(_spec("words")))
    assert status == 429 and "max_active_queries_per_analyst" in message and "3" in message, message
    quota = a.call("GET", "/v1/quota")
    assert (quota["epsilon_quota"], quota["epsilon_used"], quota["epsilon_remaining"]) == (4.0, 4.0, 0.0)
    assert (quota["active_queries"], quota["max_active_queries"], quota["configured"]) == (3, 3, False)
    a.cancel(first)  # nothing seen yet: refunded, and one active slot free again
    assert a.call("GET", "/v1/quota")["epsilon_used"] == 2.0
    a.submit(_spec("words", 2.0))
    # an admin raises this token's quota; analysts may not
    tid = quota["token_id"]
    assert _status(lambda: a.call("PUT", f"/v1/admin/tokens/{tid}/quota", {"epsilon": 100}))[0] == 403
    view = admin.call("PUT", f"/v1/admin/tokens/{tid}/quota", {"epsilon": 10})
    assert (view["epsilon_quota"], view["epsilon_remaining"], view["configured"]) == (10.0, 6.0, True)
    assert _status(lambda: admin.call("PUT", "/v1/admin/tokens/999999/quota", {"epsilon": 1}))[0] == 404
    assert _status(lambda: admin.call("PUT", f"/v1/admin/tokens/{tid}/quota", {"epsilon": -1}))[0] == 422


def test_formation_deadline_fails_the_query_and_refunds(start: Any) -> None:
    srv = start(FA_COHORT_FORMATION_TIMEOUT_S="3")
    a = AnalystClient(srv.url, srv.token("analyst"))
    own = a.submit(_spec("deadline", 1.0, formation_timeout_s=1.5))["id"]
    default = a.submit(_spec("deadline", 1.0))["id"]
    assert a.call("GET", "/v1/budgets/deadline")["spent_epsilon"] == 2.0
    for qid, seconds in ((own, "1.5"), (default, "3")):
        final = a.wait(qid, timeout_s=60, poll_s=0.2)
        assert final["status"] == "failed", final
        assert final["error"].startswith(f"no cohort formed within {seconds} s: only 0 available devices, need 10"), final
    ledger = a.call("GET", "/v1/budgets/deadline")
    assert (ledger["spent_epsilon"], ledger["queries_charged"]) == (0.0, 0), ledger
    assert a.call("GET", "/v1/quota")["active_queries"] == 0


class _Idlers:
    """Registered devices that keep checking in and never answer an assignment: every cohort they are in
    aborts at its first phase deadline."""

    def __init__(self, url: str, n: int) -> None:
        self.devices = [SyncDevice(url) for _ in range(n)]
        for d in self.devices:
            d.register()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._loop, args=(d,), daemon=True) for d in self.devices]
        for t in self.threads:
            t.start()

    def _loop(self, dev: SyncDevice) -> None:
        while not self.stop.is_set():
            status, _, _ = dev.call("POST", "/v1/device/checkin", json.dumps({"wait_s": 1}).encode())
            if status != 200:
                time.sleep(0.2)

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(10)


def test_consecutive_aborted_cohorts_fail_the_query(start: Any) -> None:
    srv = start(FA_MAX_CONSECUTIVE_ABORTS="2")
    a = AnalystClient(srv.url, srv.token("analyst"))
    idlers = _Idlers(srv.url, 3)
    try:
        qid = a.submit(_spec("aborts", 1.0, min_clients=3, max_clients=3, phase_timeout_s=1))["id"]
        final = a.wait(qid, timeout_s=90, poll_s=0.2)
    finally:
        idlers.close()
    assert final["status"] == "failed", final
    assert final["error"].startswith("2 consecutive cohorts aborted (max_consecutive_aborts); last reasons: "), final
    assert "advertise_keys" in final["error"] and "(×2)" in final["error"], final
    assert final["progress"]["cohorts"] == {"aborted": 2}, final
    assert a.call("GET", "/v1/budgets/aborts")["spent_epsilon"] == 0.0  # no masked input was ever closed


def _join_cohort(url: str, n: int) -> list[tuple[SyncDevice, dict[str, Any]]]:
    devices = [SyncDevice(url) for _ in range(n)]
    for d in devices:
        d.register()
    with ThreadPoolExecutor(n) as pool:
        assignments = list(pool.map(lambda d: d.checkin_until_assigned(60), devices))
    assert len({a["cohort_id"] for a in assignments}) == 1
    return list(zip(devices, assignments))


def _drive(members: list[tuple[SyncDevice, dict[str, Any]]], phases: int) -> None:
    """Run the members' secagg clients through the first `phases` phases (each device sends its message, then
    long-polls until the phase closed and the next message arrived)."""
    clients = []
    for dev, a in members:
        clients.append(client_session(a, dev))
    msgs = [c.start() for c in clients]
    for phase in range(phases):
        for (dev, a), msg in zip(members, msgs):
            status, _, raw = dev.call("POST", f"/v1/device/cohorts/{a['cohort_id']}/phases/{phase}", msg,
                                      "application/octet-stream")
            assert status == 202, raw
        nxt = []
        for (dev, a), client in zip(members, clients):
            while True:
                status, headers, raw = dev.call("GET", f"/v1/device/cohorts/{a['cohort_id']}/phases/{phase}/next?wait=10",
                                                ctype=None)
                if status != 202:
                    break
            assert status == 200 and headers.get("Content-Type", "").startswith("application/octet-stream"), raw
            nxt.append(client.receive(raw))
            assert int(headers["X-FA-Phase"]) > phase
        msgs = nxt


def test_cancel_refunds_only_before_a_masked_input_phase_closed(start: Any) -> None:
    srv = start()
    a = AnalystClient(srv.url, srv.token("analyst"))
    spec = _spec("unmask", 1.0, min_clients=3, max_clients=3, phase_timeout_s=30)
    # keys advertised and shared, masked inputs not yet closed: nothing could be seen → refunded
    early = a.submit(spec)["id"]
    _drive(_join_cohort(srv.url, 3), phases=2)
    assert a.cancel(early)["status"] == "cancelled"
    assert a.call("GET", "/v1/budgets/unmask")["spent_epsilon"] == 0.0
    # masked inputs closed, the server now asks for unmasking shares: cancelling keeps the charge
    late = a.submit(spec)["id"]
    members = _join_cohort(srv.url, 3)
    _drive(members, phases=3)
    view = a.cancel(late)
    assert view["status"] == "cancelled" and view["progress"]["cohorts"] == {"aborted": 1}, view
    ledger = a.call("GET", "/v1/budgets/unmask")
    assert (ledger["spent_epsilon"], ledger["queries_charged"]) == (1.0, 1), ledger
    dev, asg = members[0]
    status, _, raw = dev.call("GET", f"/v1/device/cohorts/{asg['cohort_id']}/phases/4/next?wait=0", ctype=None)
    assert status in (409, 410), raw  # the cohort was stopped
