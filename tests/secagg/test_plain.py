"""The benchmark-only unmasked pair: exact sums, the same typed errors as the masked server, and the switch."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from secagg import encoding
from secagg.errors import AbortError, ConflictError, MessageFormatError, UnknownPartyError, WrongPhaseError
from secagg.phases import Phase
from secagg.plain import BENCH_UNMASKED_ENV, PlainClientSession, PlainServerSession, bench_unmasked


@settings(max_examples=50, deadline=None)
@given(
    bits=st.integers(9, 40),
    inputs=st.lists(st.lists(st.integers(-100, 100), min_size=3, max_size=3), min_size=1, max_size=6),
    silent=st.sets(st.integers(1, 6)),
)
def test_sum_over_the_parties_that_sent(bits: int, inputs: list[list[int]], silent: set[int]) -> None:
    n = len(inputs)
    senders = [p for p in range(1, n + 1) if p not in silent]
    server = PlainServerSession(n, 3, bits, min_survivors=1)
    for p in senders:
        client = PlainClientSession(bits, encoding.to_modular(np.array(inputs[p - 1]), bits))
        server.receive(p, client.start())
        assert client.receive(b"") is None and client.phase is Phase.DONE
    if not senders:
        with pytest.raises(AbortError, match="masked_input"):
            server.close_phase()
        assert server.phase is Phase.ABORTED
        return
    assert server.close_phase() == {} and server.phase is Phase.DONE
    assert server.result is not None
    expected = np.sum([inputs[p - 1] for p in senders], axis=0) % (1 << bits)
    assert server.result.vector.tolist() == expected.tolist()
    assert server.result.contributors == frozenset(senders)
    assert server.result.dropped == {Phase.MASKED_INPUT: frozenset(range(1, n + 1)) - frozenset(senders)}


def test_typed_errors_and_identical_retries() -> None:
    server = PlainServerSession(2, 2, 8, min_survivors=2)
    msg = PlainClientSession(8, np.array([1, 2], dtype=np.uint64)).start()
    server.receive(1, msg)
    server.receive(1, msg)  # an identical retry is harmless
    with pytest.raises(ConflictError):
        server.receive(1, PlainClientSession(8, np.array([3, 4], dtype=np.uint64)).start())
    with pytest.raises(UnknownPartyError):
        server.receive(3, msg)
    with pytest.raises(MessageFormatError):
        server.receive(2, msg + b"\x00")
    with pytest.raises(AbortError):
        server.close_phase()  # one of two sent; two needed
    with pytest.raises(WrongPhaseError):
        server.receive(2, msg)


def test_the_switch_is_this_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BENCH_UNMASKED_ENV, raising=False)
    assert not bench_unmasked()
    monkeypatch.setenv(BENCH_UNMASKED_ENV, "true")
    assert not bench_unmasked()  # only the exact value "1" switches masking off
    monkeypatch.setenv(BENCH_UNMASKED_ENV, "1")
    assert bench_unmasked()
