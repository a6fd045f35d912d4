"""The API the console and `fa` read, in process: whoami, templates, a source's charges (tenancy), the fleet report,
the running cohort in a query's progress, and the INFO log lines of a query's life (text and JSON lines)."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import datetime, timedelta, timezone
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from analytics_server.db.reports import phase_durations
from analytics_server.logs import JsonLinesFormatter, fields
from analytics_server.state import STATE
from device_sdk.client import DeviceClient
from device_sdk.options import ClientOptions, NetworkOptions
from device_sdk.store import LocalStore
from queries import jsonc
from queries.registry import KINDS, get_kind
from queries.spec import QuerySpec
from tests.signed_device import SignedDevice

NOISY = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun"]},
         "privacy": {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6},
         "cohort": {"min_clients": 50, "max_clients": 100}}
EXACT = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun"], "other_bucket": "other"},
         "cohort": {"min_clients": 3, "max_clients": 4, "phase_timeout_s": 5}}


async def _get(http: aiohttp.ClientSession, url: str, token: str) -> Any:
    async with http.get(url, headers={"Authorization": f"Bearer {token}"}) as r:
        assert r.status == 200, await r.text()
        return await r.json()


async def _post(http: aiohttp.ClientSession, url: str, token: str, body: Any = None) -> Any:
    async with http.post(url, json=body, headers={"Authorization": f"Bearer {token}"}) as r:
        assert r.status in (200, 201), await r.text()
        return await r.json()


async def test_whoami_and_templates(app_server: TestServer) -> None:
    base = str(app_server.make_url("")).rstrip("/")
    store = app_server.app[STATE].store
    analyst, admin = await store.tokens.create("analyst"), await store.tokens.create("admin")
    async with aiohttp.ClientSession() as http:
        me = await _get(http, base + "/v1/whoami", analyst)
        assert me["role"] == "analyst" and (await store.tokens.lookup(analyst)).id == me["token_id"]
        assert (await _get(http, base + "/v1/whoami", admin))["role"] == "admin"
        async with http.get(base + "/v1/whoami") as r:
            assert r.status == 401
        templates = (await _get(http, base + "/v1/templates", analyst))["templates"]
    assert {t["kind"] for t in templates} == {k.name for k in KINDS if k.template is not None}
    for t in templates:
        assert jsonc.loads(t["text"]) == t["spec"]
        get_kind(QuerySpec.model_validate(t["spec"]).kind).parse_params(t["spec"]["params"])
        assert t["notes"]["cohort.min_clients"]


async def test_charges_timeline_hides_other_analysts_queries(app_server: TestServer) -> None:
    """Every charge of a source is listed (the amounts make up the shared budget), with query id, kind and name
    only for the caller's own queries; an admin sees all; a cancelled query's refund is on the timeline."""
    base = str(app_server.make_url("")).rstrip("/")
    store = app_server.app[STATE].store
    alice, bob, admin = [await store.tokens.create(r) for r in ("analyst", "analyst", "admin")]
    async with aiohttp.ClientSession() as http:
        mine = await _post(http, base + "/v1/queries", alice, {**NOISY, "name": "alice's"})
        theirs = await _post(http, base + "/v1/queries", bob, {**NOISY, "name": "bob's", "privacy": {**NOISY["privacy"], "epsilon": 0.5}})
        await _post(http, base + f"/v1/queries/{theirs['id']}/cancel", bob)  # before any cohort: refunded
        seen_by_alice = await _get(http, base + "/v1/budgets/words/charges", alice)
        seen_by_admin = await _get(http, base + "/v1/budgets/words/charges", admin)
        await _post(http, base + f"/v1/queries/{mine['id']}/cancel", alice)
    charges = seen_by_alice["charges"]
    assert [c["epsilon"] for c in charges] == [1.0, 0.5]  # oldest first
    assert charges[0] == {**charges[0], "query_id": mine["id"], "kind": "histogram", "name": "alice's", "own": True,
                          "status": "charged"}
    assert charges[1]["query_id"] is None and charges[1]["name"] is None and charges[1]["kind"] is None
    assert charges[1]["status"] == "refunded" and charges[1]["refunded_at"] and not charges[1]["own"]
    assert seen_by_alice["budget"]["spent_epsilon"] == 1.0
    assert [c["query_id"] for c in seen_by_admin["charges"]] == [mine["id"], theirs["id"]]


def test_phase_durations_from_stored_events() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    at = lambda s: t0 + timedelta(seconds=s)  # noqa: E731
    events = [
        ("a", "cohort.formed", {"n": 3}, at(0)), ("a", "cohort.phase", {"phase": "share_keys"}, at(2)),
        ("a", "cohort.phase", {"phase": "masked_input"}, at(3)), ("a", "cohort.finished", {}, at(7)),
        ("b", "cohort.formed", {"n": 3}, at(10)), ("b", "cohort.aborted", {"reason": "x"}, at(14)),
        ("c", "cohort.phase", {"phase": "unmasking"}, at(20)), ("c", "cohort.finished", {}, at(21)),  # start unknown
    ]
    stats, seen = phase_durations(list(reversed(events)))
    assert seen == 2
    assert list(stats) == ["advertise_keys", "share_keys", "masked_input"]
    assert stats["advertise_keys"].count == 2 and stats["advertise_keys"].max_s == 4.0 and stats["advertise_keys"].mean_s == 3.0
    assert stats["share_keys"].mean_s == 1.0 and stats["masked_input"].mean_s == 4.0


async def _silent_member(base: str, http: aiohttp.ClientSession, stop: asyncio.Event) -> None:
    """A registered device that checks in until it is seated in a cohort, then never answers."""
    from fa_common.b64 import b64e

    dev = SignedDevice()

    async def call(path: str, body: bytes, device: bool = True) -> Any:
        headers = {**dev.signed_headers("POST", path, body, device), "Content-Type": "application/json"}
        async with http.post(base + path, data=body, headers=headers) as r:
            return r.status, await r.json()

    status, _ = await call("/v1/device/register", json.dumps({"public_key": b64e(dev.public)}).encode(), device=False)
    assert status == 201
    while not stop.is_set():
        status, answer = await call("/v1/device/checkin", json.dumps({"wait_s": 1}).encode())
        assert status == 200, answer
        if answer.get("assignment"):
            return


async def test_progress_shows_the_running_cohort_and_logs_tell_the_story(app_server: TestServer,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    """While a cohort runs, the status view names its phase, members, answers and deadline (one member stays
    silent, so advertise_keys waits for it a while); once the query ended there is no phase or cohort. The
    server logged the submit, the cohort formed and finished, and the query's end, at INFO."""
    caplog.set_level(logging.INFO)
    base = str(app_server.make_url("")).rstrip("/")
    st = app_server.app[STATE]
    token = await st.store.tokens.create("analyst")
    stop = asyncio.Event()
    async with aiohttp.ClientSession() as http:
        devices = []
        for word in ("moon", "sun", "moon"):
            store = LocalStore()
            store.add("words", word)
            devices.append(DeviceClient(base, store,
                                        ClientOptions(network=NetworkOptions(session=http, checkin_wait_s=1))))
        silent = asyncio.create_task(_silent_member(base, http, stop))
        await asyncio.sleep(0.3)
        fleet = [asyncio.create_task(d.run_forever(stop)) for d in devices]
        qid = (await _post(http, base + "/v1/queries", token, EXACT))["id"]
        live = None
        for _ in range(600):
            view = await _get(http, base + f"/v1/queries/{qid}", token)
            if view["progress"]["cohort"]:
                live = view
                break
            await asyncio.sleep(0.02)
        final = None
        for _ in range(600):
            final = await _get(http, base + f"/v1/queries/{qid}", token)
            if final["status"] not in ("pending", "running"):
                break
            await asyncio.sleep(0.05)
        stop.set()
        await asyncio.gather(*fleet, silent)
    assert live is not None, "the running cohort never showed in the status view"
    cohort = live["progress"]["cohort"]
    assert cohort["devices"] == 4 and cohort["phase"] in ("advertise_keys", "share_keys", "masked_input", "unmasking")
    assert 0 <= cohort["answered"] <= cohort["expected"] <= cohort["devices"]
    assert cohort["deadline_at"] - cohort["phase_opened_at"] == pytest.approx(5.0)
    assert 0 <= cohort["deadline_in_s"] <= 5.0
    assert final is not None and final["status"] == "succeeded", final
    assert final["progress"]["phase"] is None and final["progress"]["cohort"] is None
    assert final["spec"]["params"]["buckets"] == ["moon", "sun"] and final["created_by"] == (await st.store.tokens.lookup(token)).id
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any(m.startswith(f"query {qid} submitted: histogram over source 'words'") for m in messages), messages
    assert any(m.startswith("cohort ") and f"formed for query {qid} round 0: 4 devices" in m for m in messages), messages
    assert any(f"of query {qid} finished" in m and "3 of 4 devices contributed" in m for m in messages), messages
    assert any(m.startswith(f"query {qid} succeeded after") for m in messages), messages
    ended = next(r for r in caplog.records if r.getMessage().startswith(f"query {qid} succeeded"))
    line = json.loads(JsonLinesFormatter().format(ended))
    assert line["event"] == "query.succeeded" and line["query_id"] == qid and line["level"] == "INFO" and line["rounds"] == 1


async def test_fleet_report_counts_devices_cohorts_and_phases(app_server: TestServer) -> None:
    base = str(app_server.make_url("")).rstrip("/")
    token = await app_server.app[STATE].store.tokens.create("analyst")
    stop = asyncio.Event()
    async with aiohttp.ClientSession() as http:
        devices = []
        for word in ("moon", "sun", "moon", "star"):
            store = LocalStore()
            store.add("words", word)
            devices.append(DeviceClient(base, store,
                                        ClientOptions(network=NetworkOptions(session=http, checkin_wait_s=1))))
        fleet = [asyncio.create_task(d.run_forever(stop)) for d in devices]
        qid = (await _post(http, base + "/v1/queries", token, {**EXACT, "cohort": {"min_clients": 4, "max_clients": 4}}))["id"]
        for _ in range(600):
            if (await _get(http, base + f"/v1/queries/{qid}", token))["status"] == "succeeded":
                break
            await asyncio.sleep(0.05)
        report = await _get(http, base + "/v1/fleet", token)
        stop.set()
        await asyncio.gather(*fleet)
    assert report["devices_registered"] == 4 and report["processes_live"] == 1
    assert report["cohorts_total"] == {"finished": 1} and report["cohorts_recent"] == {"finished": 1}
    assert report["checkins_total"] >= 4 and report["queries"] == {"succeeded": 1}
    assert {"advertise_keys", "share_keys", "masked_input", "unmasking"} <= set(report["phase_durations"])
    assert report["cohorts_sampled"] == 1 and report["abort_reasons"] == []


def test_json_lines_formatter() -> None:
    log = logging.getLogger("test.jsonlines")
    record = log.makeRecord("test.jsonlines", logging.INFO, __file__, 1, "query %s ended: %s", ("q1", "ok"), None,
                            extra=fields(event="query.succeeded", query_id="q1", seconds=1.5, when=datetime(2026, 1, 1)))
    line = json.loads(JsonLinesFormatter().format(record))
    assert line["message"] == "query q1 ended: ok" and line["level"] == "INFO" and line["logger"] == "test.jsonlines"
    assert line["event"] == "query.succeeded" and line["seconds"] == 1.5 and line["when"].startswith("2026-01-01")
    assert line["ts"].endswith("+00:00")

