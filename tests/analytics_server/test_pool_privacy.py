"""Device pool hand-over and the privacy hook's behaviour without noise."""

from __future__ import annotations

import asyncio

import pytest

from analytics_server import privacy
from analytics_server.pool import DevicePool
from queries.envelope import Assignment
from queries.registry import get_kind
from queries.spec import QuerySpec
from secagg.encoding import bits_for


class _Cohort:
    def __init__(self, expects: bool) -> None:
        self.expects = expects

    def still_expects(self, device_id: str) -> bool:
        return self.expects


def _assignment() -> Assignment:
    return Assignment(query_id="q", round=0, cohort_id="c", party_id=1, kind="histogram", source="w", task={},
                      secagg={}, threat_model="semi_honest", phase_timeout_s=1)


async def test_long_poll_gets_assignment_and_busy_devices_are_not_available() -> None:
    pool = DevicePool(fresh_s=5)
    waiter = asyncio.create_task(pool.wait("d1", 5))
    await asyncio.sleep(0.01)
    pool.touch("d2")
    assert sorted(pool.available()) == ["d1", "d2"]
    cohort = _Cohort(True)
    pool.assign("d1", _assignment(), cohort)  # type: ignore[arg-type]
    assert (await waiter) is not None
    assert pool.available() == ["d2"]
    assert pool.current("d1") is not None
    cohort.expects = False
    assert pool.current("d1") is None  # dropped from its cohort: no re-delivery
    pool.release(["d1"], cohort)  # type: ignore[arg-type]
    assert pool.current("d1") is None and "d1" not in pool.busy


async def test_wait_times_out_to_none() -> None:
    pool = DevicePool(fresh_s=5)
    assert await pool.wait("d1", 0.05) is None
    assert pool.available() == ["d1"]


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
