"""The benchmark's unmasked mode end to end in process: a server built with `create_app(…, unmasked=True)` is given
the `UNMASKED` protocol (no branch on it anywhere else) and runs a histogram with devices built with the benchmark's
session factory; its cohorts are stored as "plain", their assignments start at masked input, and the released
counts are exact."""

from __future__ import annotations

from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer

from analytics_server.app import create_app
from analytics_server.protocols import UNMASKED
from analytics_server.settings import Settings
from analytics_server.state import STATE
from device_sdk import sessions
from device_sdk.hooks import DeviceHooks
from secagg.phases import Phase
from tests.analytics_server.conftest import TEST_SETTINGS
from tests.device_sdk.fleet import Fleet, analyst, run_query

WORDS = [["moon"], ["sun"], ["star"], ["moon"], ["sun"], ["moon"]]
SPEC: dict[str, Any] = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun", "star"]},
                        "privacy": {"mechanism": "none", "validation": "none"},
                        "cohort": {"min_clients": 6, "max_clients": 6, "phase_timeout_s": 5}}


async def test_an_unmasked_server_runs_the_benchmark_s_cohorts(migrated_url: str) -> None:
    server = TestServer(create_app(Settings(**{**TEST_SETTINGS, "db_url": migrated_url}), unmasked=True))
    await server.start_server()
    try:
        st = server.app[STATE]
        assert st.orchestrator.protocol is UNMASKED
        url = str(server.make_url(""))
        hdr = await analyst(server)
        seen: list[int] = []
        async with aiohttp.ClientSession() as http:
            fleet = Fleet(server, http)
            hooks = DeviceHooks(session_factory=sessions.UNMASKED)
            for rows in WORDS:
                fleet.add(rows, hooks=hooks)
            real_make = type(st.orchestrator)._make_cohort

            def make(self: Any, *args: Any, **kwargs: Any) -> Any:
                cohort = real_make(self, *args, **kwargs)
                seen.extend(a.first_phase for a in cohort.assignments.values())
                assert cohort.mode == "plain" and cohort.validation is None
                return cohort

            st.orchestrator._make_cohort = make.__get__(st.orchestrator)  # type: ignore[method-assign]
            final = await run_query(http, url, SPEC, hdr)
            await fleet.stop()
        assert final["status"] == "succeeded", final
        assert final["result"]["result"]["clients"] == 6
        assert final["result"]["result"]["counts"] == {"moon": 3, "sun": 2, "star": 1}  # exact: no noise, no masks
        assert seen and set(seen) == {Phase.MASKED_INPUT}
        rnd = await st.store.rounds.get(final["id"], 0)
        assert rnd is not None
        assert {(c.mode, c.status) for c in await st.store.cohorts.of_round(rnd.id)} == {("plain", "finished")}
    finally:
        await server.close()
