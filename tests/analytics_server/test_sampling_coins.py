"""Sampling coins (TrieHH's per-round Bernoulli q): a keyed function of the round's stored secret and the
device id — the same coin after a restart, and the calibrated rate on average."""

from __future__ import annotations

import asyncio
import math
import time

from aiohttp import ClientSession
from aiohttp.test_utils import TestServer
from sqlalchemy import delete, insert

from analytics_server import sampling
from analytics_server.app import create_app
from analytics_server.db.engine import make_engine
from analytics_server.db.models import DevicePresence, Round
from analytics_server.db.store import Store
from analytics_server.settings import Settings
from analytics_server.state import STATE
from queries.kind import RoundPlan

RATE = 0.05
DEVICES = [f"{i:032x}" for i in range(10_000)]
TRIEHH = {"kind": "heavy_hitters", "source": "words",
          "params": {"mode": "triehh", "theta": 10, "sample_rate": RATE, "max_length": 3},
          "cohort": {"min_clients": 100_000, "max_clients": 100_000}}  # never forms: the pool holds 10,000


def _within(count: int, n: int, rate: float) -> bool:
    return abs(count - n * rate) <= 5 * math.sqrt(n * rate * (1 - rate))


def test_coin_is_a_keyed_function_with_the_sample_rate() -> None:
    a, b = sampling.new_secret(), sampling.new_secret()
    assert a != b and len(a) == 32
    coins_a = [sampling.sampled(a, d, RATE) for d in DEVICES]
    assert coins_a == [sampling.sampled(a, d, RATE) for d in DEVICES]  # deterministic
    assert _within(sum(coins_a), len(DEVICES), RATE)
    coins_b = [sampling.sampled(b, d, RATE) for d in DEVICES]
    assert coins_a != coins_b  # another round, other coins
    assert all(0.0 <= sampling.coin(a, d) < 1.0 for d in DEVICES[:100])
    assert all(sampling.sampled(a, d, 1.0) for d in DEVICES[:100])


async def _eligible_after_start(url: str, analyst: str, query_id: str | None) -> tuple[str, set[str], bytes]:
    """Start the app on `url` (submitting the query on the first start), put the devices in its pool and
    return the devices its orchestrator finds eligible for round 0."""
    settings = Settings(db_url=url, retry_after_s=60, cohort_formation_wait_s=0.3, checkin_max_wait_s=2)
    server = TestServer(create_app(settings))
    await server.start_server()
    try:
        st = server.app[STATE]
        if query_id is None:
            async with ClientSession(str(server.make_url(""))) as http:
                r = await http.post("/v1/queries", json=TRIEHH, headers={"Authorization": f"Bearer {analyst}"})
                assert r.status == 201, await r.text()
                query_id = (await r.json())["id"]
        deadline = time.monotonic() + 20
        rnd: Round | None = None
        while time.monotonic() < deadline:
            rnd = await st.store.rounds.get(query_id, 0)
            if rnd is not None and rnd.sampling_secret is not None:
                break
            await asyncio.sleep(0.05)
        assert rnd is not None and rnd.sampling_secret is not None, "round 0 never got its sampling secret"
        async with st.store.sessions() as s:  # the devices checked in (at any process)
            await s.execute(delete(DevicePresence))
            await s.execute(insert(DevicePresence), [{"device_id": d, "available_until": time.time() + 600} for d in DEVICES])
            await s.commit()
        eligible = set(await st.orchestrator._eligible(rnd, RoundPlan(**rnd.plan), set(), 1 << 20))
        return query_id, eligible, rnd.sampling_secret
    finally:
        await server.close()


async def test_coins_survive_a_restart_and_match_the_sample_rate(migrated_url: str) -> None:
    store = Store(make_engine(migrated_url))
    analyst = await store.tokens.create("analyst")
    await store.engine.dispose()

    query_id, first, secret = await _eligible_after_start(migrated_url, analyst, None)
    assert _within(len(first), len(DEVICES), RATE), len(first)
    # A new process on the same database (the in-process equivalent of a restart): same round, same coins.
    again, second, secret_again = await _eligible_after_start(migrated_url, analyst, query_id)
    assert again == query_id and secret_again == secret
    assert second == first
    assert first == {d for d in DEVICES if sampling.sampled(secret, d, RATE)}
