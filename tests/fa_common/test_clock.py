"""The injectable clock: the system clock reads the real clocks, the manual one moves only when advanced and
wakes its sleepers in deadline order."""

from __future__ import annotations

import asyncio
import time

import pytest

from fa_common.clock import SYSTEM_CLOCK, Clock, ManualClock, SystemClock


def test_both_clocks_satisfy_the_protocol() -> None:
    assert isinstance(SystemClock(), Clock)
    assert isinstance(ManualClock(), Clock)
    assert isinstance(SYSTEM_CLOCK, Clock)


def test_system_clock_reads_the_real_clocks() -> None:
    before = time.time()
    assert before <= SYSTEM_CLOCK.time() <= time.time()
    m = time.monotonic()
    assert m <= SYSTEM_CLOCK.monotonic() <= time.monotonic()


def test_manual_clock_moves_only_on_advance() -> None:
    clock = ManualClock(start=1000.0)
    assert (clock.time(), clock.monotonic()) == (1000.0, 0.0)
    clock.advance(2.5)
    assert (clock.time(), clock.monotonic()) == (1002.5, 2.5)
    clock.set_time(50.0)
    assert (clock.time(), clock.monotonic()) == (50.0, 2.5)
    with pytest.raises(ValueError, match="seconds"):
        clock.advance(-1)


async def test_manual_sleepers_wake_in_deadline_order_only_when_advanced() -> None:
    clock = ManualClock()
    woke: list[str] = []

    async def sleeper(name: str, s: float) -> None:
        await clock.sleep(s)
        woke.append(name)

    tasks = [asyncio.create_task(sleeper("late", 10)), asyncio.create_task(sleeper("early", 3))]
    while clock.sleepers < 2:
        await asyncio.sleep(0)
    clock.advance(2.9)
    await asyncio.sleep(0)
    assert woke == []
    clock.advance(0.1)
    while not woke:
        await asyncio.sleep(0)
    assert woke == ["early"] and clock.sleepers == 1
    clock.advance(7)
    await asyncio.gather(*tasks)
    assert woke == ["early", "late"] and clock.sleepers == 0


async def test_manual_zero_sleep_only_yields() -> None:
    clock = ManualClock()
    await asyncio.wait_for(clock.sleep(0), timeout=5)
    assert clock.monotonic() == 0.0
