"""Devices simulated on one event loop with a shared `compute_gate` take turns on their phase computations, so
each message leaves as soon as it is computed: the server sees the first masked inputs while later devices are
still computing theirs, instead of every device computing before any request is written (a burst that stalls
the phase's arrivals and can make the server close it early without devices that are alive)."""

from __future__ import annotations

import asyncio

import aiohttp

from analytics_server.cohort import CohortRuntime
from device_sdk.hooks import DeviceHooks
from secagg.client import ClientSession
from secagg.phases import Phase
from tests.device_sdk.fleet import Fleet, analyst, run_query

SPEC = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun", "star"]},
        "cohort": {"min_clients": 12, "max_clients": 12, "phase_timeout_s": 10}}


async def test_a_gated_fleet_sends_each_message_before_the_next_device_computes(start_app_server, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    events: list[str] = []
    receive, submit = ClientSession.receive, CohortRuntime.submit

    def computing(self: ClientSession, data: bytes) -> bytes | None:
        out = receive(self, data)
        if self.phase is Phase.MASKED_INPUT:  # it just computed its masked input
            events.append("computed")
        return out

    async def arriving(self: CohortRuntime, device_id: str, phase: int, data: bytes) -> None:
        if phase == Phase.MASKED_INPUT:
            events.append("arrived")
        await submit(self, device_id, phase, data)

    monkeypatch.setattr(ClientSession, "receive", computing)
    monkeypatch.setattr(CohortRuntime, "submit", arriving)
    server = await start_app_server()
    url = str(server.make_url(""))
    async with aiohttp.ClientSession() as http:
        fleet = Fleet(server, http)
        gate = asyncio.Lock()
        for i in range(12):
            fleet.add(["moon", "sun", "star"][i % 3: i % 3 + 1], hooks=DeviceHooks(compute_gate=gate))
        final = await run_query(http, url, SPEC, await analyst(server))
        await fleet.stop()
    assert final["status"] == "succeeded", final
    assert events.count("computed") == events.count("arrived") == 12
    last_computed = len(events) - 1 - events[::-1].index("computed")
    assert events.index("arrived") < last_computed, f"every device computed before any message arrived: {events}"
