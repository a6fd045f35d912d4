"""The protocol phases shared by the client and server state machines."""

from __future__ import annotations

from enum import IntEnum


class Phase(IntEnum):
    ADVERTISE_KEYS = 0
    SHARE_KEYS = 1
    MASKED_INPUT = 2
    CONSISTENCY_CHECK = 3
    UNMASKING = 4
    DONE = 5
    ABORTED = 6

    @property
    def label(self) -> str:
        return self.name.lower()
