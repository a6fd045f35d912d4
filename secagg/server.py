"""The server side of secure aggregation as a sans-IO state machine.

The caller feeds each party's message with `receive(party, bytes)` and ends a phase with
`close_phase()` — when everyone expected has answered or at its own deadline; parties that did not
answer are then dropped. `close_phase()` returns the next message for each remaining party, raises
`AbortError` when a threshold can no longer be met, and after the unmasking phase sets `result`.

Task binding: `task_digest` (the cohort's task as the devices hash it) enters every key the server derives and
every signature it checks. With `identity_public_keys` (always, in the service) each party's share keys must carry
its identity key's signature over its advertised keys bound to session and task — a bad one is refused before it
reaches any peer; the server keeps them for the member entries it adds to the routed shares of a party that asks for
signed members outside its neighbourhood. The routed shares carry no sender's signature: a device knows its senders
agreed to the session, task and members list by their shares opening under channel keys bound to them (docs/secagg.md,
"Devices that check the server").

Masked vectors are added into one running sum as they arrive, so memory is O(dim), not O(n·dim).
Unmasking reconstructs every needed secret with batched Lagrange coefficients, then subtracts the
survivors' self masks and the pairwise masks that survivors shared with parties that dropped after
sharing keys.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any
from dataclasses import dataclass, field

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from secagg import crypto, encoding, shamir
from secagg.config import SecAggConfig
from secagg.graph import NeighbourGraph
from secagg.errors import (
    AbortError,
    ConfigError,
    ConflictError,
    DuplicateKeyError,
    InvalidInputError,
    MessageFormatError,
    SignatureError,
    UnknownPartyError,
    WrongPhaseError,
    WrongSessionError,
)
from secagg.messages import (
    AdvertiseKeys,
    ConsistencyRequest,
    ConsistencySignature,
    MaskedInput,
    MaskedInputProved,
    Message,
    MemberEntry,
    PeerEntry,
    RoutedShares,
    ShareKeys,
    ShareKind,
    UnmaskRequest,
    UnmaskShares,
    decode,
    encode_bitmap,
    encode_blob,
    encode_pair,
    encode_peer_keys,
    encode_routed,
    max_client_message_size,
)
from secagg.meter import Meter, NullMeter
from secagg.phases import Phase

SHARE_CIPHERTEXT_BYTES = 8 + 2 * shamir.SHARE_BYTES + 16
_PRIME_BYTES = shamir.to_bytes(shamir.PRIME)
_PROBE_KEY = X25519PrivateKey.from_private_bytes(hashlib.sha256(crypto.DOMAIN + b"low-order-probe").digest())
"""Fixed, public scalar for rejecting low-order keys: X25519 clamps every scalar to a multiple of the
cofactor 8 (Langley, Hamburg, Turner, RFC 7748 §5), so the shared secret is all-zero exactly for
low-order points whatever the scalar; the probe protects nothing and needs no randomness."""

NO_IDENTITY = bytes(32)
"""The identity key in member leaves and peer entries of a session without identities (benchmarks)."""

_EXPECTS: dict[Phase, type[Message]] = {
    Phase.ADVERTISE_KEYS: AdvertiseKeys,
    Phase.SHARE_KEYS: ShareKeys,
    Phase.MASKED_INPUT: MaskedInput,
    Phase.CONSISTENCY_CHECK: ConsistencySignature,
    Phase.UNMASKING: UnmaskShares,
}
_NEXT: dict[Phase, frozenset[Phase]] = {
    Phase.ADVERTISE_KEYS: frozenset({Phase.SHARE_KEYS}),
    Phase.SHARE_KEYS: frozenset({Phase.MASKED_INPUT}),
    Phase.MASKED_INPUT: frozenset({Phase.CONSISTENCY_CHECK, Phase.UNMASKING}),  # the latter in process only (bench)
    Phase.CONSISTENCY_CHECK: frozenset({Phase.UNMASKING}),
    Phase.UNMASKING: frozenset({Phase.DONE}),
}
"""The session's transitions when a phase closes (any phase may also end in ABORTED); `close_phase` refuses others."""


@dataclass(frozen=True)
class AggregateResult:
    vector: np.ndarray
    """Sum modulo 2^bits (uint64) of the inputs of `contributors`."""
    contributors: frozenset[int]
    dropped: dict[Phase, frozenset[int]] = field(default_factory=dict)


class ServerSession:
    def __init__(
        self,
        config: SecAggConfig,
        identity_public_keys: Mapping[int, bytes] | None = None,
        meter: Meter | None = None,
        input_validator: Callable[[int, bytes], None] | None = None,
        task_digest: bytes = crypto.NO_TASK,
        identity_tokens: Mapping[int, bytes] | None = None,
    ) -> None:
        """`input_validator(party, proof)`: when given, every masked input must carry a validity proof
        (`MaskedInputProved`) and the validator must accept it (raising InvalidInputError otherwise), before
        the vector is added to the sum; a party whose proof fails is dropped at once. `identity_tokens`: each
        party's issuer token (docs/identities.md), relayed with the routed shares so that devices can tell
        credentialed peers from invented ones; the server itself does not check them here (registration did)."""
        if config.active and identity_public_keys is None:
            raise ConfigError("identity_public_keys are required in the active threat model")
        if identity_tokens is not None:
            missing = set(range(1, config.n + 1)) - set(identity_tokens)
            if identity_public_keys is None or missing:
                raise ConfigError(f"identity_tokens: need identity_public_keys and a token for every party "
                                  f"(missing {sorted(missing)[:5]})")
        self.config = config
        self._ids = dict(identity_public_keys or {})
        self._tokens = dict(identity_tokens or {})
        self._token_blobs = {p: encode_blob(t) for p, t in self._tokens.items()}
        self._signed = identity_public_keys is not None
        """Whether share keys must carry a valid signature over the party's advertised keys (always in the service)."""
        self._bind = crypto.binding(config.session_id, task_digest)
        """Session id ‖ task digest; from the close of phase 0 on, with the members root appended."""
        self.members_root: bytes | None = None
        """The members root fixed when phase 0 closed (`crypto.members_root`): seeds the graph, enters the binding."""
        self._key_sigs: dict[int, bytes] = {}
        self._wanted: dict[int, int] = {}
        self._meter = meter or NullMeter()
        self._validator = input_validator
        self.refused: dict[int, str] = {}
        """Parties whose masked input failed validation → why (they are dropped from the masked-input phase)."""
        self._graph: NeighbourGraph | None = None
        """Drawn when phase 0 closes, from the members root."""
        self._t = config.share_threshold
        self.phase = Phase.ADVERTISE_KEYS
        self._expected = frozenset(range(1, config.n + 1))
        self._digests: dict[int, bytes] = {}
        self._keys: dict[int, AdvertiseKeys] = {}
        self._key_owner: dict[bytes, int] = {}
        self._cts: dict[int, dict[int, bytes]] = {}
        self._acc = np.zeros(config.dim, dtype=config.work_dtype)
        self._sigs: dict[int, bytes] = {}
        self._shares: dict[int, UnmaskShares] = {}
        self._u: dict[int, frozenset[int]] = {}
        self.dropped: dict[Phase, frozenset[int]] = {}
        self.result: AggregateResult | None = None
        self.abort_reason: AbortError | None = None
        self._heard: dict[int, int] = {}
        """Per party whose neighbourhood the open phase must keep at t: how many of its closed neighbours answered."""
        self._short = 0
        """How many of those parties have fewer than t answering neighbours so far."""
        self._cover_all = False
        self._advertised_ready: tuple[int, bool] | None = None
        """(answers, whether closing advertise keys with them would keep them all): `_advertised_keep_all`'s cache."""
        self._open_coverage()

    # -- public API -------------------------------------------------------------------------------

    def expected(self) -> frozenset[int]:
        return self._expected

    def received(self) -> frozenset[int]:
        return frozenset(self._digests)

    def received_count(self) -> int:
        """How many parties answered the open phase (O(1); `received()` copies the set)."""
        return len(self._digests)

    def has_answered(self, party: int) -> bool:
        return party in self._digests

    def receive(self, party: int, data: bytes) -> None:
        """Validate and record one party's message for the current phase."""
        if self.phase in (Phase.DONE, Phase.ABORTED):
            raise WrongPhaseError(f"session is {self.phase.label}; no messages are accepted")
        if not isinstance(party, int) or not 1 <= party <= self.config.n:
            raise UnknownPartyError(f"party {party!r} is not part of this cohort")
        if party not in self._expected:
            raise UnknownPartyError(f"party {party} is not expected in phase {self.phase.label}")
        digest = hashlib.sha256(data).digest()
        previous = self._digests.get(party)
        if previous is not None:
            if previous == digest:
                return
            raise ConflictError(f"party {party} already sent a different {self.phase.label} message")
        msg = decode(data)
        if msg.session_id != self.config.session_id:
            raise WrongSessionError("message belongs to another session")
        if msg.party != party:
            raise UnknownPartyError(f"message names party {msg.party} but was sent by party {party}")
        expected = MaskedInputProved if self.phase is Phase.MASKED_INPUT and self._validator else _EXPECTS[self.phase]
        if type(msg) is not expected:
            raise WrongPhaseError(f"{type(msg).__name__} does not belong to phase {self.phase.label}")
        _STEPS[self.phase][0](self, party, msg)
        self._count_answer(party)
        self._digests[party] = digest

    def close_phase(self) -> dict[int, bytes]:
        """End the current phase; returns the next message per remaining party (empty when done)."""
        if self.phase in (Phase.DONE, Phase.ABORTED):
            raise WrongPhaseError(f"session is {self.phase.label}")
        phase = self.phase
        try:
            out = _STEPS[phase][1](self)
        except AbortError as exc:
            self.phase = Phase.ABORTED
            self.abort_reason = exc
            raise
        if self.phase not in _NEXT[phase]:
            raise RuntimeError(f"secagg server: {phase.label} closed into {self.phase.label}, not a transition of the table")
        self._digests = {}
        if self.phase not in (Phase.DONE, Phase.ABORTED):
            self._open_coverage()
        return out

    @property
    def survivor_threshold(self) -> int:
        """Fewest parties with which any phase may close (`SecAggConfig.survivor_threshold`)."""
        return self.config.survivor_threshold

    def max_message_size(self, proof_bytes: int = 0) -> int:
        """Largest message a party can legitimately send in this session, with validity proofs of `proof_bytes`."""
        cfg = self.config
        return max_client_message_size(cfg.dim, cfg.bits, cfg.resolved_degree, proof_bytes)

    def close_ready(self) -> bool:
        """Whether closing the open phase now would lose nothing the protocol needs: it would not abort, would
        not prune a party that answered (advertise and share keys), and would keep every share-keys survivor's
        secrets recoverable (t answering neighbours in masked input and the consistency check; t shares of each
        needed secret in unmasking). Later answers could add contributors but never rescue a phase closed
        now, so a caller may close it before its deadline once answers stall. O(1); kept up to date per
        answer in O(degree) — except advertise keys, whose graph is drawn from the answers only when it closes:
        there the graph the answers so far would draw is checked (O(n), once per answer count)."""
        return (
            self.phase not in (Phase.DONE, Phase.ABORTED)
            and self._short == 0
            and len(self._digests) >= self.config.survivor_threshold
            and (self.phase is not Phase.ADVERTISE_KEYS or self._advertised_keep_all())
        )

    def _advertised_keep_all(self) -> bool:
        """Whether closing advertise keys now would prune none of the parties that answered: each has at least t
        answering parties in its closed neighbourhood of the graph drawn from the members root of the answers so far
        (ring windows, O(n)). Cached per answer count (answers only accumulate within the phase)."""
        count = len(self._digests)
        if self._advertised_ready is not None and self._advertised_ready[0] == count:
            return self._advertised_ready[1]
        answered = frozenset(self._digests)
        root = crypto.members_root(self._member_leaves(answered))
        graph = self.config.neighbour_graph(crypto.graph_seed(self._bind, root))
        if graph.complete:
            keeps = count >= self._t
        else:
            n, half = self.config.n, graph.degree // 2
            slots = np.array(graph.slots[1:], dtype=np.int64)
            on_ring = np.zeros(n, dtype=np.int64)
            on_ring[slots[np.array(sorted(answered), dtype=np.int64) - 1]] = 1
            doubled = np.concatenate(([0], np.cumsum(np.concatenate((on_ring, on_ring, on_ring)))))
            centre = slots + n  # party u's window is ring slots slot[u] − half .. slot[u] + half (wrapping)
            window = doubled[centre + half + 1] - doubled[centre - half]
            keeps = all(window[u - 1] >= self._t for u in answered)
        self._advertised_ready = (count, keeps)
        return keeps

    def survivors(self, phase: Phase) -> frozenset[int]:
        """Parties that completed `phase` (available once it closed)."""
        return self._u.get(phase, frozenset())

    # -- message validation -----------------------------------------------------------------------

    def _accept_advertise_keys(self, party: int, msg: AdvertiseKeys) -> None:
        if self._signed:
            if len(msg.signature) != 64 or party not in self._ids:
                raise SignatureError(f"party {party}: advertised keys must be signed by its identity key")
            with self._meter.measure("signatures"):
                crypto.verify(self._ids[party], msg.signature, crypto.keys_payload(msg.c_pk, msg.s_pk),
                              f"party {party}'s advertised keys")
        for key in (msg.c_pk, msg.s_pk):
            crypto.agree(_PROBE_KEY, key)  # low-order keys would break every peer's key agreement
        for key in (msg.c_pk, msg.s_pk):
            owner = self._key_owner.get(key)
            if owner is not None or msg.c_pk == msg.s_pk:
                raise DuplicateKeyError(f"party {party}: public key already advertised by party {owner or party}")
        for key in (msg.c_pk, msg.s_pk):
            self._key_owner[key] = party
        self._keys[party] = msg

    def _accept_share_keys(self, party: int, msg: ShareKeys) -> None:
        wanted = self._neighbours_in(party, self._u[Phase.ADVERTISE_KEYS]) - {party}
        cts = dict(msg.ciphertexts)
        if len(cts) != len(msg.ciphertexts) or cts.keys() != wanted:
            raise UnknownPartyError(f"party {party}: ciphertexts must go to exactly its {len(wanted)} peers")
        for v, ct in msg.ciphertexts:
            if len(ct) != SHARE_CIPHERTEXT_BYTES:
                raise MessageFormatError(f"party {party}: ciphertext for {v} has length {len(ct)}")
        if self._signed:
            keys = self._keys[party]
            if len(msg.signature) != 64 or party not in self._ids:
                raise SignatureError(f"party {party}: share keys must carry its identity key's signature over its keys")
            payload = crypto.advertise_payload(self._bind, party, keys.c_pk, keys.s_pk)
            with self._meter.measure("signatures"):
                crypto.verify(self._ids[party], msg.signature, payload, f"party {party}'s keys for this session and task")
            self._key_sigs[party] = msg.signature
        if msg.members_wanted:
            self._wanted[party] = min(msg.members_wanted, self.config.n)
        self._cts[party] = cts

    def _accept_masked_input(self, party: int, msg: MaskedInput | MaskedInputProved) -> None:
        cfg = self.config
        if msg.bits != cfg.bits or msg.dim != cfg.dim:
            raise MessageFormatError(f"vector: expected dim {cfg.dim} at {cfg.bits} bits, got {msg.dim} at {msg.bits}")
        vec = encoding.unpack(msg.packed, cfg.dim, cfg.bits, cfg.work_dtype)
        if self._validator is not None:
            assert isinstance(msg, MaskedInputProved)
            try:
                self._validator(party, msg.proof)
            except InvalidInputError as exc:
                self.refused[party] = str(exc)
                self._expected = self._expected - {party}
                raise
        np.add(self._acc, vec, out=self._acc)

    def _accept_consistency_check(self, party: int, msg: ConsistencySignature) -> None:
        payload = crypto.consistency_payload(self._bind, self._survivor_bitmap)
        crypto.verify(self._ids[party], msg.signature, payload, f"party {party}'s consistency check")
        self._sigs[party] = msg.signature

    def _accept_unmasking(self, party: int, msg: UnmaskShares) -> None:
        u3 = self._u[Phase.MASKED_INPUT]
        wanted = {
            v: ShareKind.SELF_MASK_SEED if v in u3 else ShareKind.MASK_KEY
            for v in self._neighbours_in(party, self._u[Phase.SHARE_KEYS])
        }
        got = {v: k for v, k, _ in msg.shares}
        if len(got) != len(msg.shares) or got != wanted:
            raise UnknownPartyError(f"party {party}: unmask shares do not match the survivor set")
        for v, _, share in msg.shares:  # fixed-width big-endian: byte order is numeric order
            if share >= _PRIME_BYTES:
                raise MessageFormatError(f"party {party}: share for {v} is out of the field")
        self._shares[party] = msg

    # -- closing readiness ------------------------------------------------------------------------

    def _open_coverage(self) -> None:
        """Start counting answers for the phase just opened. Share keys must keep each party that answers (its
        answering neighbours ≥ t, else the close prunes it); the later phases must keep every share-keys survivor's
        secrets recoverable (≥ t of its neighbours answer, in unmasking with its shares). Phase 0 counts nothing:
        the graph is drawn only when it closes, from the keys that came in."""
        self._cover_all = self.phase in (Phase.MASKED_INPUT, Phase.CONSISTENCY_CHECK, Phase.UNMASKING)
        cover = self._u[Phase.SHARE_KEYS] if self._cover_all else self._expected
        self._heard = dict.fromkeys(cover, 0)
        self._short = len(cover) if self._cover_all else 0

    def _count_answer(self, party: int) -> None:
        if self._graph is None:
            return
        heard, t = self._heard, self._t
        for u in self._graph.closed(party):
            if u in heard:
                heard[u] += 1
                if heard[u] == t and (self._cover_all or u in self._digests):
                    self._short -= 1
        if not self._cover_all and heard[party] < t:
            self._short += 1

    # -- phase transitions ------------------------------------------------------------------------

    @property
    def graph(self) -> NeighbourGraph:
        """The neighbour graph (drawn when phase 0 closed)."""
        if self._graph is None:
            raise WrongPhaseError("the neighbour graph is drawn when phase 0 closes")
        return self._graph

    def _neighbours_in(self, u: int, members: frozenset[int]) -> frozenset[int]:
        return self.graph.closed_set(u) & members

    def _prune(self, members: frozenset[int]) -> frozenset[int]:
        """Drop parties whose neighbourhood within `members` is below the threshold, to a fixpoint (each
        removal lowers its neighbours' counts, which are checked again: O(n·degree))."""
        current = set(members)
        count = {u: len(self._neighbours_in(u, members)) for u in members}
        short = [u for u in sorted(members) if count[u] < self._t]
        while short:
            u = short.pop()
            if u not in current:
                continue
            current.discard(u)
            for w in self.graph.closed(u):
                if w in current:
                    count[w] -= 1
                    if count[w] < self._t:
                        short.append(w)
        return frozenset(current)

    def _finish_phase(self, phase: Phase, survivors: frozenset[int]) -> None:
        self.dropped[phase] = self._expected - survivors
        self._u[phase] = survivors
        if len(survivors) < self.config.survivor_threshold:
            raise AbortError(phase.label, self.config.survivor_threshold, len(survivors))

    def _member_leaves(self, answered: frozenset[int]) -> bytes:
        """The members list: one leaf per party 1..n, `ABSENT_LEAF` for a party that did not advertise."""
        leaves = bytearray(crypto.ABSENT_LEAF * self.config.n)
        size = crypto.MEMBER_LEAF_BYTES
        for v in answered:
            k = self._keys[v]
            leaves[(v - 1) * size: v * size] = crypto.member_leaf(v, self._ids.get(v, NO_IDENTITY), k.c_pk, k.s_pk)
        return bytes(leaves)

    def _close_advertise_keys(self) -> dict[int, bytes]:
        cfg = self.config
        answered = frozenset(self._digests)
        members = self._member_leaves(answered)
        self.members_root = root = crypto.members_root(members)
        self._graph = cfg.neighbour_graph(crypto.graph_seed(self._bind, root))
        self._bind = crypto.round_binding(self._bind, root)
        u1 = self._prune(answered)
        self._finish_phase(Phase.ADVERTISE_KEYS, u1)
        entry = {v: PeerEntry(v, self._ids.get(v, NO_IDENTITY), k.c_pk, k.s_pk, k.signature,
                              self._tokens.get(v, b"")).encode()
                 for v, k in self._keys.items() if v in u1}
        sid = cfg.session_id
        out = {}
        for u in sorted(u1):  # each party's entry is encoded once and joined into its neighbours' messages
            out[u] = encode_peer_keys(sid, u, [entry[v] for v in self.graph.closed(u) if v in u1], members)
        self.phase, self._expected = Phase.SHARE_KEYS, u1
        return out

    def _close_share_keys(self) -> dict[int, bytes]:
        u2 = self._prune(frozenset(self._digests))
        self._finish_phase(Phase.SHARE_KEYS, u2)
        sid, signed = self.config.session_id, self._signed
        member_entry: dict[int, bytes] = {}
        ordered = sorted(u2)
        out = {}
        for v in ordered:
            senders = [u for u in self.graph.closed(v) if u != v and u in u2]
            members: list[int] = []
            wanted = self._wanted.get(v, 0) if signed else 0
            if wanted:
                closed = self.graph.closed_set(v)
                for w in ordered:
                    if len(members) >= wanted:
                        break
                    if w in closed:
                        continue
                    if w not in member_entry:
                        k = self._keys[w]
                        member_entry[w] = MemberEntry(w, self._ids[w], k.c_pk, k.s_pk, self._key_sigs[w]).encode()
                    members.append(w)
            tokens = self._token_blobs
            out[v] = encode_routed(sid, v, [encode_pair(u, self._cts[u][v]) for u in senders],
                                   [member_entry[w] for w in members],
                                   [tokens[w] for w in members] if tokens else [])
        self._cts.clear()
        self.phase, self._expected = Phase.MASKED_INPUT, u2
        return out

    def _require_share_holders(self, phase: Phase, holders: frozenset[int]) -> None:
        for u in sorted(self._u[Phase.SHARE_KEYS]):
            have = len(self._neighbours_in(u, holders))
            if have < self._t:
                raise AbortError(phase.label, self._t, have, f"party {u}'s secrets would have too few share holders")

    def _close_masked_input(self) -> dict[int, bytes]:
        u3 = frozenset(self._digests)
        self._finish_phase(Phase.MASKED_INPUT, u3)
        self._require_share_holders(Phase.MASKED_INPUT, u3)
        self._survivor_bitmap = encode_bitmap(u3, self.config.n)
        sid = self.config.session_id
        if self.config.active:
            self.phase = Phase.CONSISTENCY_CHECK
            out = {u: ConsistencyRequest(sid, u, self._survivor_bitmap).encode() for u in sorted(u3)}
        else:
            self.phase = Phase.UNMASKING
            out = {u: UnmaskRequest(sid, u, self._survivor_bitmap, ()).encode() for u in sorted(u3)}
        self._expected = u3
        return out

    def _close_consistency_check(self) -> dict[int, bytes]:
        u4 = frozenset(self._digests)
        self._finish_phase(Phase.CONSISTENCY_CHECK, u4)
        self._require_share_holders(Phase.CONSISTENCY_CHECK, u4)
        out = {}
        for u in sorted(u4):
            sigs = tuple((v, self._sigs[v]) for v in sorted(self._neighbours_in(u, u4)))
            out[u] = UnmaskRequest(self.config.session_id, u, self._survivor_bitmap, sigs).encode()
        self.phase, self._expected = Phase.UNMASKING, u4
        return out

    def _reconstruct(
        self, rec: shamir.BatchReconstructor, owners: frozenset[int], collected: dict[int, dict[int, bytes]], what: str
    ) -> dict[int, int]:
        """Each owner's secret from t of its neighbours' shares, in ascending owner order. Any t shares give
        the same secret, so the owners are visited in ring order and each reuses the previous owner's t
        holders while all of them answered: nearby parties' neighbourhoods share most members, so a few dozen
        sets of Lagrange coefficients (O(t²) each) serve a thousand secrets instead of one set per secret."""
        slot, n, t = self.graph.slots, self.config.n, self._t
        out: dict[int, int] = {}
        xs: tuple[int, ...] = ()
        for u in sorted(owners, key=slot.__getitem__):
            have = collected[u]
            label = f"party {u}'s {what}"
            if len(have) < t:
                rec.reconstruct(have, label, "unmasking")  # raises AbortError naming the shortfall
            if not xs or any(x not in have for x in xs):  # the t holders furthest ahead on the ring last longest
                xs = tuple(sorted(have, key=lambda x: (slot[x] - slot[u] + n // 2) % n)[-t:])
            out[u] = rec.reconstruct({x: have[x] for x in xs}, label, "unmasking")
        return dict(sorted(out.items()))

    def _close_unmasking(self) -> dict[int, bytes]:
        cfg = self.config
        u5 = frozenset(self._digests)
        self._finish_phase(Phase.UNMASKING, u5)
        u2, u3 = self._u[Phase.SHARE_KEYS], self._u[Phase.MASKED_INPUT]
        collected: dict[int, dict[int, bytes]] = {v: {} for v in u2}
        for w, msg in self._shares.items():
            for v, _, share in msg.shares:
                collected[v][w] = share
        rec = shamir.BatchReconstructor(self._t)
        with self._meter.measure("shamir"):
            seeds = self._reconstruct(rec, u3, collected, "self-mask seed")
            keys = self._reconstruct(rec, u2 - u3, collected, "mask key")

        total = self._acc
        stream = crypto.MaskStream(cfg.dim, cfg.work_dtype, self._meter)
        for u, seed in seeds.items():
            if seed >> 256:
                raise AbortError("unmasking", self._t, 0, f"party {u}'s self-mask seed reconstructed out of range")
            stream.add_into(total, crypto.self_mask_key(shamir.secret_from_int(seed), self._bind, u), -1)
        for v, key_int in keys.items():
            raw = key_int.to_bytes(33, "big")
            if raw[0] or crypto.x25519_public_of(raw[1:]) != self._keys[v].s_pk:
                raise AbortError("unmasking", self._t, 0, f"party {v}'s mask key does not match its public key")
            sk = X25519PrivateKey.from_private_bytes(raw[1:])
            for u in sorted(self._neighbours_in(v, u3) - {v}):
                with self._meter.measure("key_agreement"):
                    shared = sk.exchange(X25519PublicKey.from_public_bytes(self._keys[u].s_pk))
                    key = crypto.pair_mask_key(shared, self._bind, u, v)
                stream.add_into(total, key, -1 if u < v else +1)
        vector = total.astype(np.uint64) & np.uint64(cfg.modulus_mask)
        self.result = AggregateResult(vector, u3, dict(self.dropped))
        self.phase, self._expected = Phase.DONE, frozenset()
        self._shares.clear()
        return {}


_Accept = Callable[[ServerSession, int, Any], None]
_Close = Callable[[ServerSession], dict[int, bytes]]
_STEPS: dict[Phase, tuple[_Accept, _Close]] = {  # through the instance, so a subclass's handler is the one called
    Phase.ADVERTISE_KEYS: (lambda s, p, m: s._accept_advertise_keys(p, m), lambda s: s._close_advertise_keys()),
    Phase.SHARE_KEYS: (lambda s, p, m: s._accept_share_keys(p, m), lambda s: s._close_share_keys()),
    Phase.MASKED_INPUT: (lambda s, p, m: s._accept_masked_input(p, m), lambda s: s._close_masked_input()),
    Phase.CONSISTENCY_CHECK: (lambda s, p, m: s._accept_consistency_check(p, m),
                              lambda s: s._close_consistency_check()),
    Phase.UNMASKING: (lambda s, p, m: s._accept_unmasking(p, m), lambda s: s._close_unmasking()),
}
"""Per open phase: the handler of a party's message (its type checked against `_EXPECTS` first) and the handler that
closes the phase (and moves to one of `_NEXT`)."""
