"""The device's own policy, over real HTTP against the real app (in process): what it refuses, before reading
any data; refusals reach the server's /metrics and free the device's seat; the ledger and transparency log
match what was sent. Misbehaving servers are the real app with its assignment patched."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from analytics_server import cohort_plan as cohort_plan_module
from analytics_server.state import STATE
from device_sdk.hooks import DeviceHooks
from device_sdk import DevicePolicy
from queries.envelope import Assignment
from tests.device_sdk.fleet import Fleet, analyst, metric, run_query

WORDS = [["moon"], ["sun", "moon"], ["star"], ["moon"], ["sun"], ["moon", "star"], ["sun"], ["star"]]
PLAIN = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun", "star"]},
         "cohort": {"min_clients": 5, "max_clients": 6, "phase_timeout_s": 3}}
NOISY = {**PLAIN, "privacy": {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6}}


async def test_require_noise_refuses_mechanism_none_without_reading_data(start_app_server) -> None:  # type: ignore[no-untyped-def]
    server = await start_app_server()
    url = str(server.make_url(""))
    hdr = await analyst(server)
    async with aiohttp.ClientSession() as http:
        fleet = Fleet(server, http)
        strict = fleet.add(["moon", "sun"], DevicePolicy(require_noise=True))
        others = [fleet.add(rows) for rows in WORDS[:5]]
        final = await run_query(http, url, {**PLAIN, "cohort": {**PLAIN["cohort"], "max_clients": 6}}, hdr)
        await fleet.stop()
        assert final["status"] == "succeeded", final
        assert strict.store.reads == [], "a refused assignment must not read the collection"
        assert [r.reason for r in strict.refusals] and {r.reason for r in strict.refusals} == {"noise_required"}
        assert any(o.status == "refused" and o.reason == "noise_required" for o in strict.outcomes)
        assert strict.client.transparency_log() == [] and strict.contributions == []
        assert await metric(http, url, "fa_device_refusals_total", 'reason="noise_required"') == len(strict.refusals) == 1
        assert final["result"]["result"]["clients"] == 5  # the others' sum, without waiting for the refuser
        assert all(d.store.reads == ["words"] for d in others)


async def test_max_epsilon_per_day_stops_after_the_budget(start_app_server) -> None:  # type: ignore[no-untyped-def]
    """ε 1 per query, 1.5 a day: the first query is charged, the second refused (reported), and with the budget
    spent to the cap the device stops checking in at all."""
    server = await start_app_server()
    url = str(server.make_url(""))
    hdr = await analyst(server)
    async with aiohttp.ClientSession() as http:
        fleet = Fleet(server, http)
        limited = fleet.add(["moon"], DevicePolicy(max_epsilon_per_day=1.5))
        for rows in WORDS[:5]:
            fleet.add(rows)
        everyone = {**NOISY, "cohort": {**NOISY["cohort"], "min_clients": 6}}  # the limited device is seated
        first = await run_query(http, url, everyone, hdr)
        second = await run_query(http, url, NOISY, hdr)
        await fleet.stop()
        assert first["status"] == second["status"] == "succeeded", (first, second)
        (record,) = limited.client.transparency_log()
        assert record.query_id == first["id"] and record.epsilon == 1.0 and record.status == "finished"
        assert [r.reason for r in limited.refusals] == ["epsilon_per_day"] and limited.store.reads == ["words"]
        assert limited.client.ledger.spent_since(0)[0] == 1.0

        limited.client.policy = DevicePolicy(max_epsilon_per_day=1.0)  # the cap is reached: no more check-ins
        checkins = await metric(http, url, "fa_device_checkins_total")
        out = await limited.client.run_once()
        assert out.status == "paused" and out.detail == "daily limit reached" and out.retry_after > 3600
        assert await metric(http, url, "fa_device_checkins_total") == checkins


async def test_a_cohort_shrunk_below_the_devices_minimum_is_refused_before_unmasking(start_app_server) -> None:  # type: ignore[no-untyped-def]
    """Seven devices, two vanish before the masked input: the five survivors are enough for the server (its
    minimum is 3) but below the devices' own minimum of 6, so none signs the survivor set (the consistency round),
    let alone reveals a share — the server can unmask nothing and the cohort aborts, saying why."""
    server = await start_app_server(max_consecutive_aborts=1)
    url = str(server.make_url(""))
    hdr = await analyst(server)
    spec = {**PLAIN, "cohort": {"min_clients": 3, "max_clients": 7, "phase_timeout_s": 2}}
    async with aiohttp.ClientSession() as http:
        fleet = Fleet(server, http)
        strict = [fleet.add(rows, DevicePolicy(min_cohort=6)) for rows in WORDS[:5]]
        for rows in WORDS[5:7]:
            fleet.add(rows, hooks=DeviceHooks(dropout=lambda a: 2))  # silent from the masked-input phase on
        final = await run_query(http, url, spec, hdr)
        await fleet.stop()
        assert await metric(http, url, "fa_device_refusals_total", 'reason="survivors_below_minimum"') == 5
    assert final["status"] == "failed" and "survivors_below_minimum ×5" in final["error"], final
    assert "consistency_check" in final["error"]
    for dev in strict:
        (out,) = [o for o in dev.outcomes if o.status != "idle"]
        assert out.reason == "survivors_below_minimum" and "5 parties, below this party's minimum of 6" in out.detail
        (record,) = dev.client.transparency_log()  # its masked vector had left: logged, never unmasked
        assert record.status == "abandoned" and record.sent_at is not None and record.min_survivors == 6
    (cohort,) = await server.app[STATE].store.cohorts.of_round(1)
    assert cohort.status == "aborted" and cohort.contributors == 0


def _lying_server(monkeypatch: pytest.MonkeyPatch, lie: Callable[[dict[str, Any]], None]) -> None:
    """The real orchestrator, with every assignment it hands out bent by `lie` (on its JSON)."""
    real = cohort_plan_module.Assignment

    def make(**fields: Any) -> Assignment:
        wire = real(**fields).model_dump(mode="json")
        lie(wire)
        return real.model_validate(wire)

    monkeypatch.setattr(cohort_plan_module, "Assignment", make)


def _set(path: str, value: Callable[[Any], Any]) -> Callable[[dict[str, Any]], None]:
    def bend(a: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        for p in parents:
            a = a[p]
        a[leaf] = value(a[leaf])

    return bend


LIES = {
    "halved noise": (_set("noise.scale", lambda s: s / 2), "noise_below_floor"),
    "claims its noise meets a third of the epsilon": (_set("privacy.epsilon", lambda e: e / 3), "noise_below_floor"),
    "multiplies the vector without scaling the noise": (_set("noise.encoding_scale", lambda s: s * 4), "noise_below_floor"),
    "asks for three votes per device with one vote's noise": (_set("task.max_contributions", lambda k: 3), "noise_below_floor"),
    "claims a t_min the cohort cannot reach": (_set("privacy.t_min", lambda t: 50), "cohort_too_small"),
    "a round beyond those the epsilon covers": (_set("round", lambda r: 1), "privacy_unverifiable"),
    "drops the noise but not the claim": (_set("noise", lambda n: None), "privacy_unverifiable"),
}


@pytest.mark.parametrize("lie", list(LIES), ids=list(LIES))
async def test_a_server_below_the_recomputed_noise_floor_is_refused(start_app_server, monkeypatch, lie) -> None:  # type: ignore[no-untyped-def]
    """Devices with the default policy (no limits of their own) still refuse noise below what the query's public
    (ε, δ, rounds, t_min) and the task's own sensitivity allow, without reading their data."""
    bend, reason = LIES[lie]
    _lying_server(monkeypatch, bend)
    server = await start_app_server(max_consecutive_aborts=1)
    url = str(server.make_url(""))
    hdr = await analyst(server)
    async with aiohttp.ClientSession() as http:
        fleet = Fleet(server, http)
        devices = [fleet.add(rows) for rows in WORDS[:6]]
        final = await run_query(http, url, {**NOISY, "cohort": {**NOISY["cohort"], "max_clients": 6}}, hdr)
        await fleet.stop()
        assert await metric(http, url, "fa_device_refusals_total", f'reason="{reason}"') == 6
    assert final["status"] == "failed" and f"{reason} ×6" in final["error"], final
    for dev in devices:
        assert dev.store.reads == [] and dev.client.transparency_log() == []
        assert {r.reason for r in dev.refusals} == {reason}


async def test_the_honest_server_passes_and_the_transparency_log_matches_what_was_sent(start_app_server) -> None:  # type: ignore[no-untyped-def]
    """Devices with a strict policy take part in an honest noisy query; each one's log entry names the query,
    round, cohort, kind and collection, the noise scale the server stored for the round, the ε the device
    charged (the query's), and whether the server counted it — which matches the server's own record."""
    server = await start_app_server()
    url = str(server.make_url(""))
    hdr = await analyst(server)
    policy = DevicePolicy(allowed_sources={"words": ["histogram"]}, require_noise=True, max_epsilon_per_query=1.0,
                          max_epsilon_per_day=2.0, min_cohort=5, max_contributions_per_day=3)
    async with aiohttp.ClientSession() as http:
        fleet = Fleet(server, http)
        devices = [fleet.add(rows, policy) for rows in WORDS[:6]]
        final = await run_query(http, url, {**NOISY, "cohort": {**NOISY["cohort"], "max_clients": 6}}, hdr)
        await fleet.stop()
        assert final["status"] == "succeeded", final
        contributors = (await (await http.get(f"{url}/v1/admin/queries/{final['id']}/contributors", headers=hdr)).json())["rounds"]["0"]
        assert await metric(http, url, "fa_device_refusals_total") == 0
    st = server.app[STATE]
    rnd = await st.store.rounds.get(final["id"], 0)
    (cohort,) = await st.store.cohorts.of_round(rnd.id)
    for dev in devices:
        (record,) = dev.client.transparency_log()
        assert (record.query_id, record.round, record.cohort_id, record.kind, record.source) == (
            final["id"], 0, cohort.id, "histogram", "words")
        assert record.status == "finished" and record.contributed == (dev.client.device_id in contributors)
        assert record.mechanism == "skellam" and record.noise and record.proofs  # histograms prove by default
        assert record.noise_scale == rnd.noise["per_device_scale"] and record.encoding_scale == rnd.noise["encoding_scale"]
        assert record.epsilon == record.query_epsilon == 1.0 and record.query_delta == 1e-6
        assert record.cohort_size == cohort.n and record.min_survivors == 5
        assert record.accepted_at <= record.sent_at <= record.ended_at
        assert dev.contributions == [record] and dev.refusals == []
    assert sorted(contributors) == sorted(d.client.device_id for d in devices)


async def test_an_opted_out_collection_is_deleted_and_never_read(start_app_server) -> None:  # type: ignore[no-untyped-def]
    """The user opts out of "words": its rows are gone from the file, later rows are dropped, and an assignment on
    it is refused (reported) without reading; the query finishes with the others."""
    server = await start_app_server()
    url = str(server.make_url(""))
    hdr = await analyst(server)
    async with aiohttp.ClientSession() as http:
        fleet = Fleet(server, http)
        user = fleet.add(["moon", "sun", "moon"])
        for rows in WORDS[:5]:
            fleet.add(rows)
        assert user.client.opt_out("words") == 3
        user.store.add("words", "star")
        final = await run_query(http, url, PLAIN, hdr)
        await fleet.stop()
        assert await metric(http, url, "fa_device_refusals_total", 'reason="opted_out"') == len(user.refusals)
    assert final["status"] == "succeeded" and final["result"]["result"]["clients"] == 5, final
    assert {r.reason for r in user.refusals} == {"opted_out"} and user.store.reads == []
    assert user.store._db.execute("SELECT COUNT(*) FROM rows").fetchone()[0] == 0  # noqa: SLF001 (the file itself)
    assert user.client.transparency_log() == []
