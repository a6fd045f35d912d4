"""Acceptance: bad input from a member of a live cohort gets a 4xx naming the problem, never a 5xx, and breaks
nothing — the fleet's result stays exact. Bad input that needs no cohort is checked against the app in
process (tests/analytics_server/test_bad_input.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from analyst_client.cli import AnalystClient
from secagg import encoding
from secagg.messages import MaskedInputProved, decode
from tests.e2e.harness import Fleet, Server, SyncDevice, check_exact, client_session, server_on_fresh_sqlite

pytestmark = pytest.mark.e2e

GOOD = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun"]},
        "cohort": {"min_clients": 10, "max_clients": 100, "phase_timeout_s": 5}}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with server_on_fresh_sqlite(tmp_path_factory.mktemp("bad"), env={"FA_BINARY_BODY_LIMIT": "200000"}) as s:
        yield s


@pytest.fixture(scope="module")
def tokens(srv: Server) -> dict[str, str]:
    return {"analyst": srv.token("analyst"), "admin": srv.token("admin")}


def test_wrong_vector_length_and_content_type_in_a_live_cohort(srv: Server, tokens: dict[str, str], tmp_path: Path) -> None:
    """A hand-driven member sends a too-long masked vector (400), a wrong content type (415), an oversized body
    (413), a conflicting retry (409), then the right message; the cohort completes exactly, with it included."""
    admin = AnalystClient(srv.url, tokens["admin"])
    fleet = Fleet(srv.url, 20, tmp_path, seed=21)
    try:
        spec = {**GOOD, "cohort": {"min_clients": 15, "max_clients": 100, "phase_timeout_s": 30}}
        qid = admin.submit(spec)["id"]
        dev = SyncDevice(srv.url)
        dev.register()
        a = dev.checkin_until_assigned()
        client = client_session(a, dev)  # this device holds no words: an all-zero contribution (with its proof)
        base = f"/v1/device/cohorts/{a['cohort_id']}/phases"
        msg, phase = client.start(), 0
        status, _, raw = dev.call("POST", f"{base}/0", msg, "application/json")
        assert status == 415 and b"octet-stream" in raw
        status, _, raw = dev.call("POST", f"{base}/0", b"\x00" * 300_000, "application/octet-stream")
        assert status == 413
        status, _, raw = dev.call("POST", f"{base}/1", msg, "application/octet-stream")
        assert status == 409 and b"not open" in raw
        while True:
            if phase == 2:
                good = decode(msg)
                assert isinstance(good, MaskedInputProved)  # histograms prove their contributions by default
                wrong = MaskedInputProved(good.session_id, good.party, good.bits, good.dim + 1,
                                          encoding.pack(np.zeros(good.dim + 1, dtype=np.uint64), good.bits), good.proof)
                status, _, raw = dev.call("POST", f"{base}/2", wrong.encode(), "application/octet-stream")
                assert status == 400 and b"dim" in raw, raw
                status, _, raw = dev.call("POST", f"{base}/2", b"garbage", "application/octet-stream")
                assert status == 400, raw
            status, _, raw = dev.call("POST", f"{base}/{phase}", msg, "application/octet-stream")
            assert status == 202, raw
            status, _, raw = dev.call("POST", f"{base}/{phase}", msg, "application/octet-stream")
            assert status == 202, raw  # identical retry is harmless
            if phase == 0:
                other = client_session(a, dev).start()
                status, _, raw = dev.call("POST", f"{base}/0", other, "application/octet-stream")
                assert status == 409 and b"conflicting" in raw
            while True:
                status, headers, raw = dev.call("GET", f"{base}/{phase}/next?wait=10", ctype=None)
                if status != 202:
                    break
            assert status == 200, raw
            if headers.get("Content-Type", "").startswith("application/json"):
                assert json.loads(raw) == {"status": "finished", "contributed": True}
                break
            msg = client.receive(raw)
            phase = int(headers["X-FA-Phase"])
        final = admin.wait(qid, timeout_s=120)
        assert final["status"] == "succeeded", final
        truth = fleet.truth()
        truth[dev.device_id] = {"words": []}
        res = check_exact(admin, qid, spec, truth)
        assert dev.device_id in admin.call("GET", f"/v1/admin/queries/{qid}/contributors")["rounds"]["0"]
        assert res["result"]["clients"] >= 15
    finally:
        fleet.stop()
