"""The protocol session a device runs for an admitted assignment, built by a `SessionFactory`.

The client never chooses between protocols itself: it hands a `SessionInputs` (the parsed assignment, its party,
the masked content, its keys and proof, the device's policy) to the factory its hooks carry
(`DeviceHooks.session_factory`) and drives whatever `DeviceSession` comes back: `start()` for the first message,
`receive(bytes)` for each of the server's, until `phase` is DONE. The factories, by name in `SESSION_FACTORIES`:

- `SECURE_AGGREGATION` (the default, and the only one an app's device has): `secagg.ClientSession`, held to the
  device's own survivor floor, checking its peers as the policy says, bound to the task digest, and using the secagg
  keys the check-in sent ahead (docs/protocol.md, "Keys with the check-in");
- `UNMASKED`: the benchmark's session (`secagg.plain.PlainClientSession`: the vector in the clear, one phase), so
  `make bench` can report what masking costs. Only a process built for the benchmark injects it (`fa-sim` under
  `FA_BENCH_UNMASKED=1`); nothing in an assignment selects a factory, so no server can talk a device out of masking.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from device_sdk.admission import ParsedAssignment
from device_sdk.policy import DevicePolicy
from secagg.client import ClientSession, KeyPairs
from secagg.phases import Phase
from secagg.plain import PlainClientSession
from secagg.randomness import RandomSource


class DeviceSession(Protocol):
    """A sans-IO client session: the first message, then one answer per server message (None: nothing to send)."""

    @property
    def phase(self) -> Phase: ...

    def start(self) -> bytes | None: ...

    def receive(self, data: bytes) -> bytes | None: ...


@dataclass(frozen=True)
class SessionInputs:
    """What a session is built from: the parsed assignment, the masked content (`vector`, already modular),
    the device's identity key, its randomness for the session, the validity proof, the survivor floor it holds the
    cohort to, the keys the check-in sent ahead (None: none were taken) and the device's policy."""

    parsed: ParsedAssignment
    vector: np.ndarray
    identity_key: Ed25519PrivateKey
    randomness: RandomSource
    input_proof: bytes | None
    min_survivors: int | None
    keys: KeyPairs | None
    policy: DevicePolicy


@dataclass(frozen=True)
class SessionFactory:
    """A named way to build the device's session. `takes_checkin_keys`: its first phase is the secagg keys the
    check-in can carry (without it the device runs its first phase itself even when the server took the keys)."""

    name: str
    build: Callable[[SessionInputs], DeviceSession]
    takes_checkin_keys: bool


def _secure_aggregation(inputs: SessionInputs) -> DeviceSession:
    p, policy = inputs.parsed, inputs.policy
    return ClientSession(
        p.secagg, p.assignment.party_id, inputs.vector, inputs.identity_key, randomness=inputs.randomness,
        input_proof=inputs.input_proof, min_survivors=inputs.min_survivors, keys=inputs.keys, task_digest=p.digest,
        verify_peers=policy.verify_cohort, min_verified=policy.min_verified,
        credentialed=policy.credentialed if policy.trusted_issuers else None,
        floor_assumptions=policy.floor_assumptions,
    )


def _unmasked(inputs: SessionInputs) -> DeviceSession:
    return PlainClientSession(inputs.parsed.secagg.bits, inputs.vector)


SECURE_AGGREGATION = SessionFactory("secure_aggregation", _secure_aggregation, takes_checkin_keys=True)
UNMASKED = SessionFactory("unmasked", _unmasked, takes_checkin_keys=False)
SESSION_FACTORIES: dict[str, SessionFactory] = {f.name: f for f in (SECURE_AGGREGATION, UNMASKED)}


__all__ = ["SECURE_AGGREGATION", "SESSION_FACTORIES", "UNMASKED", "DeviceSession", "SessionFactory", "SessionInputs"]
