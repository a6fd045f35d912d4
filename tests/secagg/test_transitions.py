"""The server session's explicit transition table (secagg/server.py `_NEXT`): a full run visits exactly the table's
transitions, and a close handler that moved anywhere else is refused, not followed."""

from __future__ import annotations

import os

import numpy as np
import pytest

from secagg.client import ClientSession
from secagg.config import SecAggConfig
from secagg.phases import Phase
from secagg.server import _NEXT, ServerSession


def _cohort(server_type: type[ServerSession] = ServerSession) -> tuple[ServerSession, dict[int, ClientSession]]:
    cfg = SecAggConfig(session_id=os.urandom(16), n=5, dim=3, bits=16)  # in process: no consistency round
    return server_type(cfg), {p: ClientSession(cfg, p, np.full(3, p, dtype=np.uint64)) for p in range(1, 6)}


def _run(server: ServerSession, clients: dict[int, ClientSession]) -> list[tuple[Phase, Phase]]:
    seen = []
    outgoing = {p: c.start() for p, c in clients.items()}
    while server.phase is not Phase.DONE:
        for p, m in outgoing.items():
            server.receive(p, m)
        before = server.phase
        delivered = server.close_phase()
        seen.append((before, server.phase))
        outgoing = {p: r for p, m in delivered.items() if (r := clients[p].receive(m)) is not None}
    return seen


def test_a_full_run_takes_only_the_tables_transitions() -> None:
    server, clients = _cohort()
    seen = _run(server, clients)
    assert all(after in _NEXT[before] for before, after in seen)
    assert seen == [(Phase.ADVERTISE_KEYS, Phase.SHARE_KEYS), (Phase.SHARE_KEYS, Phase.MASKED_INPUT),
                    (Phase.MASKED_INPUT, Phase.UNMASKING), (Phase.UNMASKING, Phase.DONE)]
    assert server.result is not None and server.result.vector.tolist() == [15, 15, 15]


class _SkipsAhead(ServerSession):
    def _close_share_keys(self) -> dict[int, bytes]:
        out = super()._close_share_keys()
        self.phase = Phase.UNMASKING  # straight past masked input: no transition of the table
        return out


def test_a_close_handler_that_leaves_the_table_is_refused() -> None:
    server, clients = _cohort(_SkipsAhead)
    with pytest.raises(RuntimeError, match="share keys closed into unmasking|not a transition"):
        _run(server, clients)
