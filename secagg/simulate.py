"""Runs every party of one session in this process, with chosen dropouts per phase.

Used by the property tests, the benchmark and the demo. A party listed for a phase stops before sending
its message of that phase. Time is read only from the caller's `clock`, if one is given. Party p's
identity key comes from `randomness.child(f"identity/{p}")` and its session from
`randomness.child(f"party/{p}")` (OS entropy unless the caller passes a seeded source). Sessions are signed and
verified as the service runs them (every party signs its keys bound to `task_digest` and checks its peers'),
unless `signed=False`.

The neighbour graph is drawn only when phase 0 closes (from the members root, `secagg.crypto.graph_seed`), so a
caller whose later drops depend on it passes `later_drops(graph)`: called once with the server's graph, it returns
drops for the phases after advertise keys (added to `drop_before`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from secagg.client import ClientSession
from secagg.config import SecAggConfig
from secagg.crypto import NO_TASK, ed25519_public_bytes
from secagg.errors import AbortError
from secagg.graph import NeighbourGraph
from secagg.meter import Meter
from secagg.phases import Phase
from secagg.randomness import OsRandom, RandomSource, SeededRandom
from secagg.server import AggregateResult, ServerSession

PROTOCOL_PHASES = (
    Phase.ADVERTISE_KEYS,
    Phase.SHARE_KEYS,
    Phase.MASKED_INPUT,
    Phase.CONSISTENCY_CHECK,
    Phase.UNMASKING,
)


@dataclass
class RunReport:
    result: AggregateResult | None
    abort: AbortError | None
    client_s: dict[str, float] = field(default_factory=dict)
    server_s: dict[str, float] = field(default_factory=dict)
    upload_bytes: dict[int, int] = field(default_factory=dict)
    download_bytes: dict[int, int] = field(default_factory=dict)
    sent_input: frozenset[int] = frozenset()
    """Parties that sent their masked input (the server's sum must cover exactly these)."""


def run_session(
    config: SecAggConfig,
    inputs: Mapping[int, np.ndarray],
    drop_before: Mapping[Phase, Iterable[int]] | None = None,
    clock: Callable[[], float] | None = None,
    client_meter: Meter | None = None,
    server_meter: Meter | None = None,
    randomness: RandomSource | None = None,
    task_digest: bytes = NO_TASK,
    signed: bool = True,
    min_verified: int | None = None,
    verify: bool = True,
    later_drops: Callable[[NeighbourGraph], Mapping[Phase, Iterable[int]]] | None = None,
) -> RunReport:
    rng = randomness or OsRandom()
    drops = {phase: set(parties) for phase, parties in (drop_before or {}).items()}
    tick = clock or (lambda: 0.0)
    report = RunReport(None, None)
    for ph in PROTOCOL_PHASES:
        report.client_s[ph.label] = 0.0
        report.server_s[ph.label] = 0.0

    identities: dict[int, Ed25519PrivateKey] = {}
    public_ids: dict[int, bytes] | None = None
    if signed or config.active:
        identities = {p: Ed25519PrivateKey.from_private_bytes(rng.child(f"identity/{p}").bytes(32)) for p in inputs}
        public_ids = {p: ed25519_public_bytes(k) for p, k in identities.items()}
    clients = {
        p: ClientSession(config, p, vec, identities.get(p), public_ids, client_meter, rng.child(f"party/{p}"),
                         task_digest=task_digest, min_verified=min_verified, verify_peers=verify)
        for p, vec in inputs.items()
    }
    server = ServerSession(config, public_ids, server_meter, task_digest=task_digest)

    def client_step(phase: Phase, party: int, fn: Callable[[], bytes | None]) -> bytes | None:
        start = tick()
        out = fn()
        report.client_s[phase.label] += tick() - start
        if out is not None:
            report.upload_bytes[party] = report.upload_bytes.get(party, 0) + len(out)
        return out

    outgoing: dict[int, bytes] = {}
    for p, c in clients.items():
        if p in drops.get(Phase.ADVERTISE_KEYS, ()):
            continue
        msg = client_step(Phase.ADVERTISE_KEYS, p, c.start)
        if msg is not None:
            outgoing[p] = msg
    while True:
        phase = server.phase
        start = tick()
        for p, msg in outgoing.items():
            server.receive(p, msg)
        try:
            delivered = server.close_phase()
        except AbortError as exc:
            report.server_s[phase.label] += tick() - start
            report.abort = exc
            return report
        report.server_s[phase.label] += tick() - start
        if phase is Phase.ADVERTISE_KEYS and later_drops is not None:
            for ph, parties in later_drops(server.graph).items():
                drops.setdefault(ph, set()).update(parties)
        if phase is Phase.MASKED_INPUT:
            report.sent_input = frozenset(outgoing)
        if server.phase is Phase.DONE:
            report.result = server.result
            return report
        outgoing = {}
        for p, msg in delivered.items():
            report.download_bytes[p] = report.download_bytes.get(p, 0) + len(msg)
            if p in drops.get(server.phase, ()):
                continue
            reply = client_step(server.phase, p, functools.partial(clients[p].receive, msg))
            if reply is not None:
                outgoing[p] = reply


def protocol_randomness(seed: str | None) -> RandomSource:
    """OS entropy, or for `--protocol-seed S` a SeededRandom (reproducible keys, seeds and session id)."""
    return OsRandom() if seed is None else SeededRandom(b"secagg.simulate/" + seed.encode("utf-8"))


def expected_sum(inputs: Mapping[int, np.ndarray], parties: Iterable[int], bits: int) -> np.ndarray:
    total = np.zeros_like(next(iter(inputs.values())), dtype=np.uint64)
    for p in parties:
        total = total + np.asarray(inputs[p], dtype=np.uint64)
    return total & np.uint64((1 << bits) - 1)
