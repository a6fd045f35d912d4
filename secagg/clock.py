"""Moved to `fa_common.clock` (secagg itself reads no clock). Re-exported only until
`analytics_server/orchestrator.py`, which another change is editing, imports it from there; import `fa_common.clock`."""

from __future__ import annotations

from fa_common.clock import SYSTEM_CLOCK, Clock, ManualClock, SystemClock

__all__ = ["SYSTEM_CLOCK", "Clock", "ManualClock", "SystemClock"]
