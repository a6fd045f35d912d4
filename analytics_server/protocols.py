"""How a cohort aggregates: the one interface between cohort planning and a protocol's server session.

A `CohortProtocol` is what a cohort's plan carries (`analytics_server.cohort_plan`): the name stored with the cohort
row, the phase its assignments tell devices to start in (`Assignment.first_phase`, the only wire field that tells
the protocols apart), whether its masked inputs carry validity proofs, and a factory of its server session — a
sans-IO state machine (`AggregationSession`) that `analytics_server.cohort.CohortRuntime` drives without knowing
which protocol it is. The orchestrator is given one at construction and never branches on it.

Two implementations: `SECURE_AGGREGATION` (`secagg.server.ServerSession`: SecAgg+ with masks, what every real
server runs) and `UNMASKED` (`secagg.plain.PlainServerSession`: the benchmark's session, vectors in the clear;
`fa-server` picks it only under `FA_BENCH_UNMASKED=1`, see `for_benchmark`). A further protocol — a one-shot
aggregation beside SecAgg (issue 36) — is a third implementation of this interface: a name, a first phase, whether
it proves inputs, and a session with the methods of `AggregationSession`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from secagg.config import SecAggConfig
from secagg.phases import Phase
from secagg.plain import PlainServerSession
from secagg.server import AggregateResult, ServerSession


class AggregationSession(Protocol):
    """A protocol's server side as the cohort runtime drives it: messages in (`receive`), a phase closed at its
    deadline or once answers stall (`close_phase`, returning each remaining party's next message), the sum in
    `result` once `phase` is DONE."""

    phase: Phase
    result: AggregateResult | None

    @property
    def survivor_threshold(self) -> int:
        """Fewest parties with which a phase may close (≥ the round's need, hence ≥ t_min)."""
        ...

    def expected(self) -> frozenset[int]: ...

    def received_count(self) -> int: ...

    def has_answered(self, party: int) -> bool: ...

    def receive(self, party: int, data: bytes) -> None: ...

    def close_phase(self) -> dict[int, bytes]: ...

    def close_ready(self) -> bool:
        """Whether closing the open phase now would lose nothing the protocol needs."""
        ...

    def max_message_size(self, proof_bytes: int = 0) -> int:
        """Largest message a member can legitimately send (bytes), with validity proofs of `proof_bytes`."""
        ...


@dataclass(frozen=True)
class SessionInputs:
    """What a cohort's server session is built from."""

    config: SecAggConfig
    """The cohort's parameters as its assignments carry them."""
    identities: Mapping[int, bytes]
    """Each party's identity public key."""
    tokens: Mapping[int, bytes] | None
    """Each party's issuer token, when every member has one (else None)."""
    task_digest: bytes
    validator: Callable[[int, bytes], None] | None
    """Checks a masked input's validity proof (None: the round proves nothing)."""


class CohortProtocol(Protocol):
    """One way a cohort aggregates its members' vectors."""

    @property
    def name(self) -> str:
        """Stored as the cohort row's `mode` and logged."""
        ...

    @property
    def first_phase(self) -> Phase:
        """The phase a member starts in (`Assignment.first_phase`)."""
        ...

    @property
    def proves_inputs(self) -> bool:
        """Whether masked inputs carry validity proofs when the round asks for them."""
        ...

    def server_session(self, inputs: SessionInputs) -> AggregationSession: ...


@dataclass(frozen=True)
class SecureAggregation:
    """SecAgg+ (`secagg.server.ServerSession`): advertise keys, share keys, masked input, consistency, unmasking."""

    name: str = "secagg"
    first_phase: Phase = Phase.ADVERTISE_KEYS
    proves_inputs: bool = True

    def server_session(self, inputs: SessionInputs) -> AggregationSession:
        return ServerSession(inputs.config, inputs.identities, input_validator=inputs.validator,
                             task_digest=inputs.task_digest, identity_tokens=inputs.tokens)


@dataclass(frozen=True)
class Unmasked:
    """The benchmark's unmasked session (`secagg.plain`): one phase, vectors in the clear, no proofs."""

    name: str = "plain"
    first_phase: Phase = Phase.MASKED_INPUT
    proves_inputs: bool = False

    def server_session(self, inputs: SessionInputs) -> AggregationSession:
        return PlainServerSession.from_config(inputs.config)


SECURE_AGGREGATION: CohortProtocol = SecureAggregation()
UNMASKED: CohortProtocol = Unmasked()


def for_benchmark(unmasked: bool) -> CohortProtocol:
    """The protocol a server process runs: `UNMASKED` only when `make bench` built it so (`FA_BENCH_UNMASKED=1` in
    its own environment, `secagg.plain.bench_unmasked`); nothing in a query or an assignment can select it."""
    return UNMASKED if unmasked else SECURE_AGGREGATION
