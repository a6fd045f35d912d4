"""Group commit: concurrent writes share transactions, each caller gets its own result or its batch's error,
and a burst of device check-ins costs a few transactions, not one each."""

from __future__ import annotations

import asyncio
import time

import pytest
from sqlalchemy import func, select

from analytics_server.db.engine import make_engine
from analytics_server.db.batching import Batcher
from analytics_server.db.models import DevicePresence
from analytics_server.db.store import Store
from analytics_server.notify import Notifier
from analytics_server.pool import DevicePool


async def test_concurrent_items_share_batches_and_get_their_own_results() -> None:
    seen: list[list[int]] = []

    async def write(items: list[int]) -> list[int]:
        seen.append(items)
        await asyncio.sleep(0.01)
        return [i * 2 for i in items]

    gc: Batcher[int, int] = Batcher(write, max_batch=50)
    results = await asyncio.gather(*(gc.submit(i) for i in range(200)))
    assert results == [i * 2 for i in range(200)]
    assert sorted(i for b in seen for i in b) == list(range(200))
    assert max(len(b) for b in seen) <= 50
    assert len(seen) <= 5  # 1 (the first item alone) + 4 full batches


async def test_a_failed_batch_fails_its_callers_only() -> None:
    async def write(items: list[int]) -> list[int]:
        await asyncio.sleep(0.01)
        if 13 in items:
            raise OSError("database went away")
        return items

    gc: Batcher[int, int] = Batcher(write, max_batch=5)
    results = await asyncio.gather(*(gc.submit(i) for i in range(16)), return_exceptions=True)
    failed = [i for i, r in enumerate(results) if isinstance(r, OSError)]
    assert 13 in failed and len(failed) <= 5
    assert all(results[i] == i for i in range(16) if i not in failed)
    assert await gc.submit(99) == 99  # the writer recovers


async def test_a_write_returning_the_wrong_count_is_an_error() -> None:
    async def write(items: list[int]) -> list[int]:
        return items[:-1]

    gc: Batcher[int, int] = Batcher(write)
    with pytest.raises(RuntimeError, match="results for"):
        await gc.submit(1)


async def test_a_burst_of_checkins_is_written_in_few_transactions(migrated_url: str) -> None:
    store = Store(make_engine(migrated_url))
    pool = DevicePool(store, Notifier(), fresh_s=5)
    try:
        before = time.time()
        await asyncio.gather(*(pool.checkin(f"d{i}", 0) for i in range(300)))
        assert len(await store.presence.available()) == 300
        assert pool._available.batches <= 10, pool._available.batches
        assert pool._presence.batches <= 10, pool._presence.batches
        async with store.sessions() as s:
            earliest = (await s.execute(select(func.min(DevicePresence.available_until)))).scalar_one()
        assert earliest >= before + 5
    finally:
        await store.engine.dispose()


async def test_availability_outlasts_the_time_checkins_take_to_reach_the_database(migrated_url: str) -> None:
    """On a busy server a device's next check-in queues as long as this one did: its availability is
    extended by twice the smoothed lag, so a fleet polling a saturated server does not lapse."""
    store = Store(make_engine(migrated_url))
    pool = DevicePool(store, Notifier(), fresh_s=5)
    try:
        for i in range(100):  # each request arrived 4 s before it was handled
            await pool.checkin(f"slow{i}", 0, arrived=time.monotonic() - 4.0)
        assert 3.0 < pool.lag_s < 4.5
        before = time.time()
        await pool.checkin("next", 0)
        async with store.sessions() as s:
            until = (await s.execute(select(DevicePresence.available_until)
                                     .where(DevicePresence.device_id == "next"))).scalar_one()
        assert until >= before + 5 + 2 * 3.0
    finally:
        await store.engine.dispose()
