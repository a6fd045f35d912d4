"""Device pool hand-over and the privacy hook's behaviour without noise."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from sqlalchemy import update

from analytics_server import privacy
from analytics_server.db.engine import make_engine
from analytics_server.db.models import DevicePresence
from analytics_server.db.store import Store
from analytics_server.notify import ASSIGN, Notifier
from analytics_server.pool import POLL_S, DevicePool
from queries.envelope import Assignment
from queries.registry import get_kind
from queries.spec import QuerySpec
from secagg.encoding import bits_for


async def _until(read: Any, ok: Any, timeout_s: float = 10.0) -> None:
    """Poll `read()` until `ok(value)`: a check-in's availability is written by a group commit, whose timing
    depends on the machine's load."""
    deadline = time.monotonic() + timeout_s
    while not ok(got := await read()):
        assert time.monotonic() < deadline, f"condition not met within {timeout_s} s: last value {got!r}"
        await asyncio.sleep(0.02)


def _assignment(cohort_id: str = "c") -> dict[str, Any]:
    return Assignment(query_id="q", round=0, cohort_id=cohort_id, party_id=1, kind="histogram", source="w", task={},
                      secagg={}, threat_model="semi_honest", phase_timeout_s=1).model_dump(mode="json", exclude_none=True)


async def test_long_poll_gets_assignment_and_claimed_devices_are_not_available(migrated_url: str) -> None:
    store = Store(make_engine(migrated_url))
    pool = DevicePool(store, Notifier(), fresh_s=5)
    waiter = asyncio.create_task(pool.checkin("d1", 5))
    await store.presence.mark_available([("d2", time.time() + 5)])
    await _until(lambda: store.presence.available(), lambda got: sorted(got) == ["d1", "d2"])  # d1: group commit
    assert await store.presence.claim("c", ["d1", "d3"]) == ["d1"]  # d3 never checked in
    assert await store.presence.claim("c2", ["d1"]) == []  # never seated twice
    assert await store.presence.available() == ["d2"]
    pool.deliver({"d1": _assignment()})
    got, waited = await waiter
    assert got is not None and got.cohort_id == "c" and waited
    await store.engine.dispose()


async def test_assignment_is_delivered_by_notification_or_poll_and_redelivered(migrated_url: str) -> None:
    """Another process stores the assignment: a notification wakes the long-poll; without one the poll finds
    it; a claimed device checking in again gets its assignment back until the cohort drops it."""
    store = Store(make_engine(migrated_url))
    notifier = Notifier()
    pool = DevicePool(store, notifier, fresh_s=5)
    pool.start()
    try:
        for device, notify in (("d1", True), ("d2", False)):
            waiter = asyncio.create_task(pool.checkin(device, 10))
            await _until(lambda: store.presence.available(), lambda got, d=device: d in got)
            cohort = f"c-{device}"
            assert await store.presence.claim(cohort, [device]) == [device]
            async with store.sessions() as s:  # as `create_cohort` in another process
                await s.execute(update(DevicePresence).where(DevicePresence.device_id == device)
                                .values(assignment=_assignment(cohort)))
                await s.commit()
            if notify:
                await notifier.publish(ASSIGN, cohort)
            got, _ = await asyncio.wait_for(waiter, 0.5 if notify else POLL_S + 1.0)
            assert got is not None and got.cohort_id == cohort
            again, waited = await pool.checkin(device, 10)  # re-delivered at once
            assert again is not None and again.cohort_id == cohort and not waited
            await store.presence.release(cohort, [device])  # dropped: no re-delivery
            none, _ = await pool.checkin(device, 0)
            assert none is None
    finally:
        await pool.stop()
        await store.engine.dispose()


async def test_wait_times_out_to_none(migrated_url: str) -> None:
    store = Store(make_engine(migrated_url))
    pool = DevicePool(store, Notifier(), fresh_s=5)
    assert await pool.checkin("d1", 0.05) == (None, True)
    assert await store.presence.available() == ["d1"]
    await store.engine.dispose()


def test_privacy_hook_without_noise() -> None:
    kind = get_kind("histogram")
    spec = QuerySpec(kind="histogram", source="w", params={"buckets": ["a", "b"]})
    params = kind.parse_params(spec.params)
    assert privacy.check_and_calibrate(spec, kind, params, "demo") is None
    with pytest.raises(privacy.PrivacyPolicyError, match="privacy.mechanism"):
        privacy.check_and_calibrate(spec, kind, params, "production")
    plan = kind.plan_round(params, kind.initial_state(params), 0)
    assert plan is not None
    assert privacy.round_noise(None, plan) is None and privacy.device_noise_block(None) is None
    assert privacy.choose_bits(1000, plan, None) == bits_for(1000, plan.max_abs)
    block = privacy.privacy_block(spec, None, [None], [42], [11])
    assert block["epsilon"] is None and block["delta"] is None and block["mechanism"] == "none"
    assert block["contributors"] == [42] and block["min_clients"] == 10 and block["bits"] == [11]


async def test_a_claimed_device_has_no_assignment_until_its_cohort_is_stored(migrated_url: str) -> None:
    """Between the claim and the cohort's creation there is nothing to deliver (the claim used to store a
    JSON null that the delivery poll read as an assignment, and failed for every waiter)."""
    store = Store(make_engine(migrated_url))
    await store.presence.mark_available([("d1", time.time() + 30)])
    assert await store.presence.claim("c", ["d1"]) == ["d1"]
    assert await store.presence.assignments_for(["d1"]) == {}
    assert await store.presence.assignments_of_cohort("c") == {}
    await store.engine.dispose()
