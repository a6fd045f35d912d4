"""A device that proves one vector and masks another, through the real app in process (docs/validation.md, "A
failed opening"): in a noisy round its cohort's members are freed at the price of one more run of the query's
(ε, δ) — charged, logged, audited, reported — the group test names the cheater once it fails a second cohort that
shares only it with the first, and the query completes from honest devices. In a noise-free round the members
keep their seats and nothing more is charged."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp.test_utils import TestServer

from analyst_client.audit import audit_log
from analytics_server.state import STATE
from tests.analytics_server.test_validation import SKELLAM, _fleet, _rows, _spec, _submit, _wait
from tests.bent_device import BENT, bend


async def _until(check: Callable[[], Awaitable[bool]], what: str, limit_s: float = 90) -> None:
    for _ in range(int(limit_s * 10)):
        if await check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def _charge(http: aiohttp.ClientSession, url: str, hdr: dict[str, str], qid: str) -> dict[str, Any]:
    rows = (await (await http.get(f"{url}/v1/budgets/words/charges", headers=hdr)).json())["charges"]
    return next(r for r in rows if r["query_id"] == qid)


async def _app(start_app_server: Callable[..., Awaitable[TestServer]], monkeypatch: pytest.MonkeyPatch
               ) -> tuple[str, Any, str, dict[str, str]]:
    """The app with cheaters bent and cohorts formed as soon as enough devices wait: (url, state, token, headers)."""
    bend(monkeypatch)
    server = await start_app_server(cohort_formation_wait_s=0.0)
    st = server.app[STATE]
    token = await st.store.tokens.create("admin")
    return str(server.make_url("")), st, token, {"Authorization": f"Bearer {token}"}


async def test_a_cheater_masking_another_vector_is_named_and_the_noisy_query_completes(
    start_app_server: Callable[..., Awaitable[TestServer]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, st, token, hdr = await _app(start_app_server, monkeypatch)
    rng = np.random.default_rng(21)
    spec = {**_spec(min_clients=3, max_clients=3), "privacy": SKELLAM}
    stops = [asyncio.Event() for _ in range(4)]
    async with aiohttp.ClientSession() as http:
        qid = await _submit(http, url, hdr, spec)
        first = await _charge(http, url, hdr, qid)
        assert first["runs"] == 1
        cheater, c_tasks = await _fleet(http, url, [[BENT + "vote_1000", "sun"]], stops[0])
        await _until(lambda: _available(st, cheater[0].device_id), "the cheater's check-in")
        honest, h_tasks = await _fleet(http, url, _rows(rng, 2), stops[1])
        # the first cohort's honest members are free again, and the query paid one more run for it (logged)
        await _until(lambda: _failed(st, qid, 1), "the first refused sum")
        charge = await _charge(http, url, hdr, qid)
        assert charge["runs"] == 2
        assert charge["epsilon"] == pytest.approx(2 * first["epsilon"]) and charge["delta"] == pytest.approx(2 * first["delta"])
        entries = [row["entry"] for row in (await (await http.get(f"{url}/v1/log/entries")).json())["entries"]]
        runs = [e for e in entries if e.get("type") == "charge" and e.get("query_id") == qid and e.get("layer") == 2]
        assert len(runs) == 1 and runs[0]["epsilon"] == pytest.approx(first["epsilon"])

        # the honest members leave; two fresh devices arrive: the next cohort seats them with the only suspect
        # left, the cheater, whose second failure (sharing only it with the first) names it
        stops[1].set()
        await asyncio.gather(*h_tasks)
        gone = {c.device_id for c in honest}
        await _until(lambda: _unavailable(st, gone), "the honest first members to leave")
        later, l_tasks = await _fleet(http, url, _rows(rng, 2), stops[2])
        await _until(lambda: _failed(st, qid, 2), "the second refused sum")
        excluded = await st.store.queries.excluded_devices(qid)
        assert set(excluded) == {cheater[0].device_id}
        assert "failed openings" in excluded[cheater[0].device_id]

        # one more device: the round completes without the cheater
        last, z_tasks = await _fleet(http, url, _rows(rng, 1), stops[3])
        res = await _wait(http, url, hdr, qid, limit_s=120)
        for s in stops:
            s.set()
        await asyncio.gather(*c_tasks, *l_tasks, *z_tasks)
        contributors = (await (await http.get(f"{url}/v1/admin/queries/{qid}/contributors",
                                              headers=hdr)).json())["rounds"]["0"]
    assert cheater[0].device_id not in contributors
    assert set(contributors) <= {c.device_id for c in later + last} and len(contributors) == 3
    assert max(res["result"]["counts"].values(), default=0) < 100  # the vote of 1,000 never reached a release
    p = res["privacy"]
    assert p["failed_openings"] == 2 and p["runs_charged"] == 2 and p["devices_excluded"] == 1
    assert any(w["path"] == "privacy.runs_charged" for w in res["warnings"])
    assert st.metrics.devices_named == 1
    report = await asyncio.to_thread(audit_log, url, token=token)
    assert report.ok, [(f.code, f.index, f.message) for f in report.findings]


async def test_in_a_noise_free_round_the_members_keep_their_seats_and_nothing_more_is_charged(
    start_app_server: Callable[..., Awaitable[TestServer]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, st, _, hdr = await _app(start_app_server, monkeypatch)
    rng = np.random.default_rng(22)
    stop = asyncio.Event()
    async with aiohttp.ClientSession() as http:
        qid = await _submit(http, url, hdr, _spec(min_clients=3, max_clients=3))
        cheater, tasks = await _fleet(http, url, [[BENT + "vote_twice", "sun"]], stop)
        await _until(lambda: _available(st, cheater[0].device_id), "the cheater's check-in")
        honest, more = await _fleet(http, url, _rows(rng, 2), stop)
        await _until(lambda: _failed(st, qid, 1), "the refused sum")
        later, more2 = await _fleet(http, url, _rows(rng, 3), stop)
        res = await _wait(http, url, hdr, qid, limit_s=120)
        stop.set()
        await asyncio.gather(*tasks, *more, *more2)
        contributors = (await (await http.get(f"{url}/v1/admin/queries/{qid}/contributors",
                                              headers=hdr)).json())["rounds"]["0"]
    assert set(contributors) == {c.device_id for c in later}  # no first-cohort device joined a second sum
    assert res["privacy"]["failed_openings"] == 1 and "runs_charged" not in res["privacy"]
    assert not any(w["path"] == "privacy.runs_charged" for w in res["warnings"])


async def _available(st: Any, device_id: str) -> bool:
    return device_id in set(await st.store.presence.available())


async def _failed(st: Any, qid: str, n: int) -> bool:
    """n sums of the query refused and recorded (the metric counts a refusal before the store records it)."""
    return (await st.store.blame.failed_summary(qid))[0] >= n


async def _unavailable(st: Any, devices: set[str]) -> bool:
    return not devices & set(await st.store.presence.available())
