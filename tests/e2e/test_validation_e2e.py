"""Acceptance over HTTP with a real server process: devices that cheat are refused or detected and the
released histogram equals the honest devices' result.

Honest devices are `fa-sim` fleets; the cheaters run the real SDK in this process with their vector bent just
before masking (tests/bent_device.py). One query drops the devices whose proofs fail (forged, replayed) while
their cohort completes; another puts the devices that mask another vector than they proved (two votes, a vote
of 1,000, a −1) in a first cohort with a few honest devices — the opening check refuses that cohort's sum, its
devices are not seated again, and the round completes with a fresh fleet.
"""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from analyst_client.cli import AnalystClient
from device_sdk.client import DeviceClient
from device_sdk.options import ClientOptions, NetworkOptions
from device_sdk.store import LocalStore
from tests.bent_device import BENT, bend
from tests.e2e.harness import Fleet, Server, expected_result, server_on_fresh_sqlite

pytestmark = pytest.mark.e2e

BUCKETS = ["moon", "sun", "star", "cloud", "rain", "snow"]


def _spec(min_clients: int, max_clients: int) -> dict[str, Any]:
    return {"kind": "histogram", "source": "words", "params": {"buckets": BUCKETS, "other_bucket": "other"},
            "cohort": {"min_clients": min_clients, "max_clients": max_clients, "phase_timeout_s": 10}}


class Cheaters:
    """Bent devices on their own event loop in a thread of this process."""

    def __init__(self, url: str, attacks: list[str]) -> None:
        self.clients = []
        for attack in attacks:
            store = LocalStore()
            store.add_many("words", [BENT + attack, "moon", "sun"])
            self.clients.append(DeviceClient(url, store, ClientOptions(network=NetworkOptions(checkin_wait_s=2))))
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def main() -> None:
            self._stop = asyncio.Event()
            await asyncio.gather(*(c.run_forever(self._stop) for c in self.clients), return_exceptions=True)
            for c in self.clients:
                await c.close()

        self._loop.run_until_complete(main())

    @property
    def ids(self) -> set[str]:
        return {c.device_id for c in self.clients}

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    """A fresh server per test: a stopped fleet's devices stay available for seconds after they left, and seated
    in the next query's first cohort they would stall it until its phase deadline."""
    with server_on_fresh_sqlite(tmp_path, env={"FA_COHORT_FORMATION_WAIT_S": "1"}) as srv:
        yield srv


def _check(admin: AnalystClient, qid: str, spec: dict[str, Any], truth: dict[str, Any], cheaters: set[str]) -> dict[str, Any]:
    res = admin.wait(qid, timeout_s=180)
    assert res["status"] == "succeeded", res
    out = admin.result(qid)
    ids = admin.call("GET", f"/v1/admin/queries/{qid}/contributors")["rounds"]["0"]
    assert not set(ids) & cheaters
    assert set(ids) <= set(truth)
    assert out["result"] == expected_result("histogram", spec["params"], "words", truth, ids)
    assert out["privacy"]["validation"] == "proofs"
    return out


def _metric(server: Server, name: str) -> float:
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):  # process-labelled
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_bad_proofs_are_dropped(server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Forged and replayed proofs: refused at the masked input, the cohort completes without them."""
    bend(monkeypatch)
    admin = AnalystClient(server.url, server.token("admin"))
    spec = _spec(8, 20)
    qid = admin.submit(spec)["id"]
    cheaters = Cheaters(server.url, ["forged", "replayed"])
    fleet = Fleet(server.url, 10, tmp_path, seed=31, checkin_wait=2.0)
    try:
        _check(admin, qid, spec, fleet.truth(), cheaters.ids)
        assert _metric(server, "fa_validity_proofs_refused_total") == 2
    finally:
        cheaters.stop()
        fleet.stop()


def test_bent_vectors_are_detected(server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bent vectors behind valid proofs: the first cohort (the cheaters and 3 honest devices) is refused after
    unmasking; its devices are not seated again and a fresh fleet completes the round."""
    bend(monkeypatch)
    admin = AnalystClient(server.url, server.token("admin"))
    spec = _spec(6, 6)
    qid = admin.submit(spec)["id"]
    cheaters = Cheaters(server.url, ["vote_twice", "vote_1000", "negative"])
    first = Fleet(server.url, 3, tmp_path, seed=41, checkin_wait=2.0)
    fresh = None
    try:
        deadline = time.monotonic() + 120
        while _metric(server, "fa_sums_refused_total") < 1:
            assert time.monotonic() < deadline, "the cheaters' cohort was not refused"
            time.sleep(0.2)
        fresh = Fleet(server.url, 8, tmp_path, seed=42, checkin_wait=2.0)
        out = _check(admin, qid, spec, fresh.truth(), cheaters.ids | set(first.truth()))
        assert out["result"]["clients"] == 6
    finally:
        cheaters.stop()
        first.stop()
        if fresh is not None:
            fresh.stop()
    assert "detected cheating" in server.log_path.read_text(errors="replace")

