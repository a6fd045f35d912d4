"""`max_client_message_size` bounds every message a client really sends (the server refuses larger bodies
before reading them, so a bound that is too small would drop honest devices)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from secagg.config import SecAggConfig
from secagg.messages import max_client_message_size
from secagg.phases import Phase
from secagg.server import ServerSession
from secagg.simulate import run_session


@pytest.mark.parametrize(
    "n, dim, bits, threat, drops",
    [
        (6, 50, 20, "semi_honest", {Phase.MASKED_INPUT: [2], Phase.UNMASKING: [3]}),
        (5, 7, 62, "active", {}),
        (130, 3, 16, "semi_honest", {Phase.MASKED_INPUT: [1, 2, 3, 4, 5]}),
    ],
)
def test_every_client_message_fits_the_bound(monkeypatch: pytest.MonkeyPatch, n: int, dim: int, bits: int,
                                             threat: str, drops: dict[Phase, list[int]]) -> None:
    cfg = SecAggConfig(session_id=os.urandom(16), n=n, dim=dim, bits=bits, threat_model=threat)  # type: ignore[arg-type]
    sizes: dict[Phase, int] = {}
    original = ServerSession.receive

    def recording(self: ServerSession, party: int, data: bytes) -> None:
        sizes[self.phase] = max(sizes.get(self.phase, 0), len(data))
        original(self, party, data)

    monkeypatch.setattr(ServerSession, "receive", recording)
    rng = np.random.default_rng(0)
    inputs = {p: rng.integers(0, 1 << min(bits, 30), dim).astype(np.uint64) for p in range(1, n + 1)}
    report = run_session(cfg, inputs, drop_before=drops)
    assert report.result is not None
    bound = max_client_message_size(dim, bits, cfg.resolved_degree)
    expected_phases = {Phase.ADVERTISE_KEYS, Phase.SHARE_KEYS, Phase.MASKED_INPUT, Phase.UNMASKING}
    assert expected_phases <= set(sizes)
    assert max(sizes.values()) <= bound, (sizes, bound)
    # and the bound is not absurdly loose: within 4 KiB + 2× the largest real message
    assert bound <= 4096 + 2 * max(sizes.values())
