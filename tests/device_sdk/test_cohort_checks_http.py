"""Devices that check the server, over real HTTP against the real app (in process): a server that shows one member
of a cohort another task or another cohort size gets refusals (`task_mismatch`) from every member before any masked
input leaves, the cohort aborts naming them and nothing is released; a device whose `min_cohort` its verified peers
cannot meet refuses (`cohort_unverified`); both refusals stay in the device's transparency log, charging nothing.
An honest server with devices that verify and devices that do not still releases the exact histogram."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from analytics_server.db.translog_store import TransparencyLog
from analytics_server.orchestrator import Orchestrator
from analytics_server.state import STATE
from device_sdk.hooks import DeviceHooks
from device_sdk import DevicePolicy
from device_sdk.client import DeviceClient
from queries.task_digest import task_digest
from secagg import crypto, floor
from secagg.messages import PeerKeys, decode
from tests.device_sdk.fleet import Fleet, analyst, metric, run_query

WORDS = [["moon"], ["sun", "moon"], ["star"], ["moon"], ["sun"], ["moon", "star"], ["sun"], ["star"]]
SPEC = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun", "star"]},
        "cohort": {"min_clients": 5, "max_clients": 6, "phase_timeout_s": 3}}


def _two_faced(monkeypatch: pytest.MonkeyPatch, change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """The real orchestrator, showing the cohort's last party an assignment changed by `change` (the decoy-task
    attack: one victim sees what the others do not). Its session accepts each party's signature under the digest of
    what that party was shown and forwards it, so that only the devices can notice. It sends no transparency-log
    proofs, and the devices here do not require them: these tests isolate the task binding (the log's own defence
    against this attack: tests/device_sdk/test_transparency_http.py)."""
    monkeypatch.setattr(TransparencyLog, "task_proof", _no_proof)
    monkeypatch.setattr(DeviceClient, "_check_log", _no_proof)
    real = Orchestrator._make_cohort

    def make(self, *args: Any, **kwargs: Any):  # type: ignore[no-untyped-def]
        cohort = real(self, *args, **kwargs)
        victim = max(cohort.members, key=cohort.members.__getitem__)
        a = cohort.assignments[victim]
        wire = a.model_dump(mode="json", exclude_none=True)
        cohort.assignments[victim] = shown = type(a).model_validate({**wire, **change(wire)})
        session, party = cohort.session, cohort.members[victim]
        extra = shown.secagg["n"] - session.config.n  # a longer members list for a victim told of a larger cohort
        close, accept = session._close_advertise_keys, session._accept_share_keys
        victim_root: list[bytes] = []

        def close_with_the_victim_s_list() -> dict[int, bytes]:
            out = close()
            msg = decode(out[party])
            assert isinstance(msg, PeerKeys)
            leaves = msg.leaves + crypto.ABSENT_LEAF * extra
            out[party] = dataclasses.replace(msg, leaves=leaves).encode()
            victim_root.append(crypto.members_root(leaves))
            return out

        def accept_under_what_it_was_shown(p: int, msg: Any) -> None:
            saved = session._bind
            if p == party:
                session._bind = crypto.round_binding(crypto.binding(session.config.session_id, task_digest(shown)),
                                                     victim_root[0])
            try:
                accept(p, msg)
            finally:
                session._bind = saved

        session._close_advertise_keys = close_with_the_victim_s_list
        session._accept_share_keys = accept_under_what_it_was_shown
        return cohort

    monkeypatch.setattr(Orchestrator, "_make_cohort", make)


async def _no_proof(*args: Any, **kwargs: Any) -> None:
    return None


CHANGES = {
    "another task": lambda a: {"task": {**a["task"], "buckets": ["decoy1", "decoy2", "decoy3"]}},
    "another cohort size": lambda a: {"secagg": {**a["secagg"], "n": a["secagg"]["n"] + 1,  # at the floor for n + 1
                                                 "threshold": floor.plan(a["secagg"]["n"] + 1).threshold}},
    "another privacy block": lambda a: {"privacy": {**a["privacy"], "t_min": a["privacy"].get("t_min") or 1}
                                        | {"l2_sensitivity": a["privacy"]["l2_sensitivity"] + 1}},
}


@pytest.mark.parametrize("change", list(CHANGES), ids=list(CHANGES))
async def test_a_server_showing_one_device_something_else_gets_refusals_and_releases_nothing(
        start_app_server, monkeypatch, change) -> None:  # type: ignore[no-untyped-def]
    _two_faced(monkeypatch, CHANGES[change])
    server = await start_app_server(max_consecutive_aborts=1)
    url = str(server.make_url(""))
    hdr = await analyst(server)
    async with aiohttp.ClientSession() as http:
        fleet = Fleet(server, http)
        devices = [fleet.add(rows) for rows in WORDS[:6]]
        final = await run_query(http, url, SPEC, hdr)
        await fleet.stop()
        refused = await metric(http, url, "fa_device_refusals_total", 'reason="task_mismatch"')
    assert final["status"] == "failed" and "task_mismatch" in final["error"], final
    assert "result" not in final or not final.get("result"), final
    assert refused == 6, "every member refuses: the victim for its peers' signatures, the peers for the victim's"
    (cohort,) = await server.app[STATE].store.cohorts.of_round(1)
    assert cohort.status == "aborted" and cohort.contributors == 0 and "task_mismatch ×6" in (cohort.reason or "")
    for dev in devices:
        assert {r.reason for r in dev.refusals} == {"task_mismatch"}
        (record,) = dev.client.transparency_log()  # the evidence stays with the device; nothing was sent or charged
        assert record.status == "refused" and record.sent_at is None and record.epsilon is None
        assert record.detail.startswith("task_mismatch: party ") and "another task" in record.detail
        assert dev.client.ledger.spent_since(0) == (0.0, 0.0, 0) and dev.contributions == []


async def test_fewer_verified_members_than_min_cohort_is_refused_before_the_masked_input(start_app_server) -> None:  # type: ignore[no-untyped-def]
    """Seven devices want a cohort of seven verified members; one vanishes after advertising its keys, so six
    signatures verify: the n = 7 the server announces is not enough, and no masked input leaves."""
    server = await start_app_server(max_consecutive_aborts=1)
    url = str(server.make_url(""))
    hdr = await analyst(server)
    spec = {**SPEC, "cohort": {"min_clients": 3, "max_clients": 7, "phase_timeout_s": 2}}
    async with aiohttp.ClientSession() as http:
        fleet = Fleet(server, http)
        strict = [fleet.add(rows, DevicePolicy(min_cohort=7)) for rows in WORDS[:6]]
        fleet.add(WORDS[6], hooks=DeviceHooks(dropout=lambda a: 1))  # silent from share keys on
        final = await run_query(http, url, spec, hdr)
        await fleet.stop()
        assert await metric(http, url, "fa_device_refusals_total", 'reason="cohort_unverified"') == 6
    assert final["status"] == "failed" and "cohort_unverified ×6" in final["error"], final
    for dev in strict:
        (record,) = dev.client.transparency_log()
        assert record.status == "refused" and record.sent_at is None
        assert "6 distinct members" in record.detail and "minimum of 7" in record.detail


async def test_an_honest_server_with_checking_and_trusting_devices_releases_the_exact_histogram(start_app_server) -> None:  # type: ignore[no-untyped-def]
    server = await start_app_server()
    url = str(server.make_url(""))
    hdr = await analyst(server)
    async with aiohttp.ClientSession() as http:
        fleet = Fleet(server, http)
        for i, rows in enumerate(WORDS[:6]):
            fleet.add(rows, DevicePolicy(verify_cohort=i % 2 == 0, min_cohort=6 if i % 2 == 0 else None))
        final = await run_query(http, url, SPEC, hdr)
        await fleet.stop()
        assert await metric(http, url, "fa_device_refusals_total") == 0
    assert final["status"] == "succeeded", final
    counts = final["result"]["result"]["counts"]
    assert counts == {"moon": 4, "sun": 1, "star": 1}, counts  # one vote per device (the kind's default)
    for dev in fleet.devices:
        (record,) = dev.client.transparency_log()
        assert record.status == "finished" and record.contributed


def test_the_policy_field_is_typed() -> None:
    with pytest.raises(ValueError, match="verify_cohort"):
        DevicePolicy(verify_cohort="yes")  # type: ignore[arg-type]
    assert DevicePolicy().verify_cohort is True and DevicePolicy(min_cohort=5).min_verified == 5
    assert DevicePolicy(min_cohort=5, verify_cohort=False).min_verified is None
