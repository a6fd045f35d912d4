"""What a fleet simulator or a benchmark injects into a `DeviceClient` — never needed by an app, never set by a
server: one frozen `DeviceHooks` object instead of simulator-only constructor parameters and wire fields.

- `dropout`: decides, per assignment, the phase before which the simulated device stops answering (None: it
  answers every phase) — how `fa-sim --dropout` exercises the protocol's dropout recovery;
- `compute_gate`: a lock shared by the devices of one event loop so that one device computes its phase message
  at a time and sends it before the next one computes (without it the loop computes every device woken together
  before any request leaves, and the fleet's answers reach the server in bursts — a correlation that independent
  devices do not have);
- `session_factory`: the protocol session the device runs (`device_sdk.sessions`): secure aggregation by default;
  the benchmark injects `sessions.UNMASKED` (`secagg.plain`: the vector in the clear, no masks) so `make bench` can
  report what masking costs. The server forms such cohorts only when its own process is built for the benchmark;
  nothing in an assignment can ask a device for it, and a device built without this hook cannot run it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from device_sdk.sessions import SECURE_AGGREGATION, SessionFactory
from queries.envelope import Assignment

DropoutFn = Callable[[Assignment], int | None]
"""Assignment → the phase before which the device stops answering, or None."""


@dataclass(frozen=True)
class DeviceHooks:
    """Simulator and benchmark hooks of a `DeviceClient` (module docstring); the default is an app's device."""

    dropout: DropoutFn | None = None
    compute_gate: asyncio.Lock | None = None
    session_factory: SessionFactory = SECURE_AGGREGATION

    def __post_init__(self) -> None:
        if not isinstance(self.session_factory, SessionFactory):
            raise TypeError(f"hooks.session_factory: must be a device_sdk.sessions.SessionFactory, got "
                            f"{type(self.session_factory).__name__}")
