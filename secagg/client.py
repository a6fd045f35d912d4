"""The client (device) side of secure aggregation as a sans-IO state machine.

`start()` returns the AdvertiseKeys message; `receive(server_message)` returns the reply for the next
phase. Before answering, the client checks what the server shows it: peers are its graph neighbours,
its own keys were relayed unchanged, no public key appears twice, signatures verify (active model), the
survivor sets are nested (U3 ⊆ U2 ⊆ U1), contain it and hold at least the threshold of its neighbourhood
(and, with `min_survivors`, list at least that many parties in the whole cohort: the caller's own floor,
whatever the server's config says), and it never reveals both the self-mask share and the key share of one peer — not even across retried
or altered unmask requests. Answering the byte-identical message again returns the same reply.

Every random draw comes from the injected `randomness` (OS entropy by default), in this order: the
channel key c_u^SK (32 bytes), the mask key s_u^SK (32 bytes) in `start()`; then, on PeerKeys, the
self-mask seed b_u (32 bytes), the Shamir coefficients for b_u, then those for s_u^SK. A device that sent its
public keys ahead of its assignment (with its check-in, docs/protocol.md) draws the two keys earlier with
`KeyPairs.draw` from a source of its own and passes them in: `start()` then draws nothing.

Task binding (docs/secagg.md, "Devices that check the server"): `task_digest` — the device's own hash of what it
was asked to compute — enters every derived key and signed payload. With an `identity_key` the party signs its
advertised keys bound to session and task and sends the signature with its shares (the server checks it, and shows it
in member entries); with `verify_peers` (and an identity key) it verifies each peer's signature over its advertised
keys before encrypting any share to them, and before it computes its masked input it opens every share sent to it —
each under a channel key agreed with keys that peer's identity signed and bound to this session, task and members
root, so a share that opens is that peer's word that it agreed to them, and one that does not is a refusal naming
it — and verifies the signature of any member entry the server adds (`TaskMismatchError` on any failure); with
`min_verified` it refuses (`CohortUnverifiedError`) unless that many distinct identities (its own included) are so
vouched for — counted again when the survivor set arrives, among the members it lists, before the party signs or
reveals anything.
With `credentialed(identity, token)` (docs/identities.md) an identity counts — toward `min_verified` and toward the
share threshold of its neighbourhood — only when the server also relayed a token for it that the callback accepts
(an issuer vouched for it): a member the server invented signs, but has no token, so it does not count.

The members list and the graph (docs/secagg.md, "A graph the server cannot steer"): PeerKeys carries one leaf per
party (its identity and advertised keys, as the server fixed them when phase 0 closed); the party checks its own leaf
and each peer's against it, computes the members root, draws the neighbour graph from it and refuses peers outside
its own neighbourhood. The root then joins the binding of every later key and signature, so devices shown different
member lists cannot complete a session together.

The safety floor (`secagg.floor`): with `floor` (the device's own assumptions) the party refuses
(`UnsafeParametersError`) a session without the consistency round or whose degree or threshold is below the floor it
computes for n, and — with `credentialed` — a neighbourhood whose token-holding members fall short of the threshold.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from secagg import crypto, encoding, floor, shamir
from secagg.config import SecAggConfig
from secagg.errors import (
    CohortUnverifiedError,
    ConfigError,
    DecryptionError,
    DoubleRevealError,
    DuplicateKeyError,
    InconsistentSetsError,
    InconsistentSurvivorsError,
    ProtocolError,
    SignatureError,
    TaskMismatchError,
    TooFewSurvivorsError,
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
    PeerKeys,
    RoutedShares,
    ShareKeys,
    ShareKind,
    UnmaskRequest,
    UnmaskShares,
    decode,
    decode_bitmap,
)
from secagg.meter import Meter, NullMeter
from secagg.phases import Phase
from secagg.randomness import OsRandom, RandomSource

_PLAINTEXT = struct.Struct(">II33s33s")
NO_IDENTITY = bytes(32)
_FATAL = (SignatureError, DuplicateKeyError, DecryptionError, InconsistentSetsError, DoubleRevealError,
          floor.UnsafeParametersError)
"""Errors after which the client abandons the session (TooFewSurvivorsError is an InconsistentSetsError)."""


@dataclass(frozen=True)
class KeyPairs:
    """A party's two X25519 key pairs: c (the channel key, encrypting its shares) and s (the mask key, agreeing
    pairwise masks)."""

    c_sk: X25519PrivateKey
    c_pk: bytes
    s_sk: X25519PrivateKey
    s_pk: bytes

    @classmethod
    def draw(cls, source: RandomSource | None = None) -> KeyPairs:
        """Fresh pairs: the channel key from the first 32 bytes of `source`, the mask key from the next 32."""
        c_sk, c_pk = crypto.x25519_keypair(source)
        s_sk, s_pk = crypto.x25519_keypair(source)
        return cls(c_sk, c_pk, s_sk, s_pk)


class ClientSession:
    def __init__(
        self,
        config: SecAggConfig,
        party_id: int,
        input_vector: np.ndarray,
        identity_key: Ed25519PrivateKey | None = None,
        peer_identity_keys: dict[int, bytes] | None = None,
        meter: Meter | None = None,
        randomness: RandomSource | None = None,
        input_proof: bytes | None = None,
        min_survivors: int | None = None,
        keys: KeyPairs | None = None,
        task_digest: bytes = crypto.NO_TASK,
        verify_peers: bool = True,
        min_verified: int | None = None,
        credentialed: Callable[[bytes, bytes], bool] | None = None,
        floor_assumptions: floor.Assumptions | None = None,
    ) -> None:
        """`peer_identity_keys`: when given (party → identity key), every peer's identity in the members list must be
        the one listed here; the service's devices learn their peers' identities from the members list itself.
        `floor_assumptions`: the device's own assumptions for the safety floor (None: no floor, library use)."""
        if not isinstance(party_id, int) or not 1 <= party_id <= config.n:
            raise ConfigError(f"party_id: must be between 1 and n={config.n}, got {party_id!r}")
        vec = np.asarray(input_vector)
        if vec.shape != (config.dim,) or vec.dtype.kind not in "iu":
            raise ConfigError(f"input_vector: must be an integer vector of length {config.dim}")
        if vec.size and (int(vec.min()) < 0 or int(vec.max()) > config.modulus_mask):
            raise ConfigError(f"input_vector: entries must lie in [0, 2^{config.bits})")
        if config.active and identity_key is None:
            raise ConfigError("identity_key is required in the active threat model")
        if floor_assumptions is not None:
            if not config.active:
                raise floor.UnsafeParametersError(
                    f"threat model: {config.threat_model} has no consistency round: the server could show two "
                    "survivor sets; this device requires the active model")
            floor.check(config.n, config.resolved_degree, config.share_threshold, floor_assumptions)
        if min_survivors is not None and (isinstance(min_survivors, bool) or not isinstance(min_survivors, int) or min_survivors < 1):
            raise ConfigError(f"min_survivors: must be a positive integer, got {min_survivors!r}")
        if not isinstance(task_digest, bytes) or len(task_digest) != crypto.TASK_DIGEST_BYTES:
            raise ConfigError(f"task_digest: must be {crypto.TASK_DIGEST_BYTES} bytes")
        if min_verified is not None:
            if isinstance(min_verified, bool) or not isinstance(min_verified, int) or min_verified < 1:
                raise ConfigError(f"min_verified: must be a positive integer, got {min_verified!r}")
            if identity_key is None or not verify_peers:
                raise ConfigError("min_verified: needs identity_key and verify_peers")
        self.config = config
        self._min_survivors = min_survivors
        self.party = party_id
        self._input = vec.astype(config.work_dtype)
        self._proof = input_proof
        """Validity proof sent with the masked input (`MaskedInputProved`), when the cohort validates inputs."""
        self._identity = identity_key
        self._own_id = crypto.ed25519_public_bytes(identity_key) if identity_key is not None else NO_IDENTITY
        self._pinned_ids = dict(peer_identity_keys) if peer_identity_keys is not None else None
        self._peer_ids: dict[int, bytes] = {}
        self._peer_tokens: dict[int, bytes] = {}
        self._verify = verify_peers and identity_key is not None
        self._min_verified = min_verified
        self._credentialed = credentialed
        self._floor = floor_assumptions
        self._counted: dict[int, bytes] = {}
        """Party → identity of every member this party counted toward `min_verified` at the routed shares."""
        self._bind = crypto.binding(config.session_id, task_digest)
        """Session id ‖ task digest; from the peer keys on, with the members root appended."""
        self.verified_members: int | None = None
        """Distinct identities (this party's included) it verified agreed to this session and task — senders whose shares
        opened, member entries whose signatures verified — (and, with `credentialed`, whose tokens it accepted)."""
        self._meter = meter or NullMeter()
        self._rng = randomness or OsRandom()
        self._nbrs: frozenset[int] = frozenset()
        """This party's closed neighbourhood, drawn from the members root when the peer keys arrive."""
        self._leaves = b""
        self._t = config.share_threshold
        self.phase = Phase.ADVERTISE_KEYS
        self._advert: bytes | None = None
        self._keys = keys
        """Key pairs drawn ahead (sent with a check-in); None: `start()` draws them from `randomness`."""
        self._last: tuple[bytes, bytes | None] | None = None
        self._revealed: dict[int, ShareKind] = {}
        self._signed_survivors: bytes | None = None

    # -- public API -------------------------------------------------------------------------------

    def start(self) -> bytes:
        """The AdvertiseKeys message (the same bytes if called again)."""
        if self._advert is None:
            keys = self._keys or KeyPairs.draw(self._rng)
            self._c_sk, self._c_pk, self._s_sk, self._s_pk = keys.c_sk, keys.c_pk, keys.s_sk, keys.s_pk
            sig = b""
            if self._identity is not None:
                with self._meter.measure("signatures"):
                    sig = crypto.sign(self._identity, crypto.keys_payload(self._c_pk, self._s_pk))
            self._advert = AdvertiseKeys(self.config.session_id, self.party, self._c_pk, self._s_pk, sig).encode()
        return self._advert

    def receive(self, data: bytes) -> bytes | None:
        """Process one server message; returns this client's reply, or None once finished."""
        digest = hashlib.sha256(data).digest()
        if self._last is not None and self._last[0] == digest:
            return self._last[1]
        if self._advert is None:
            raise WrongPhaseError("call start() before passing server messages")
        if self.phase is Phase.ABORTED:
            raise WrongPhaseError("this client abandoned the session after a protocol violation")
        msg = decode(data)
        if msg.session_id != self.config.session_id:
            raise WrongSessionError("message belongs to another session")
        if msg.party != self.party:
            raise UnknownPartyError(f"message is addressed to party {msg.party}, this is party {self.party}")
        handler = self._handler(msg)
        try:
            reply = handler(msg)
        except _FATAL:
            self.phase = Phase.ABORTED
            raise
        self._last = (digest, reply)
        return reply

    # -- dispatch ---------------------------------------------------------------------------------

    def _handler(self, msg: Message) -> Callable[[Any], bytes]:
        p, active = self.phase, self.config.active
        if p is Phase.ADVERTISE_KEYS and isinstance(msg, PeerKeys):
            return self._on_peer_keys
        if p is Phase.SHARE_KEYS and isinstance(msg, RoutedShares):
            return self._on_routed_shares
        if p is Phase.MASKED_INPUT and active and isinstance(msg, ConsistencyRequest):
            return self._on_consistency_request
        if isinstance(msg, UnmaskRequest) and (
            (p is Phase.MASKED_INPUT and not active) or p in (Phase.CONSISTENCY_CHECK, Phase.DONE)
        ):
            return self._on_unmask_request
        raise WrongPhaseError(f"{type(msg).__name__} does not belong to phase {p.label}")

    # -- phase handlers ---------------------------------------------------------------------------

    def _on_peer_keys(self, msg: PeerKeys) -> bytes:
        cfg = self.config
        self._members_list(msg.leaves)
        parties = [p.party for p in msg.peers]
        if len(set(parties)) != len(parties):
            raise InconsistentSetsError("peer keys: a party is listed twice")
        stray = set(parties) - self._nbrs
        if stray:
            raise InconsistentSetsError(f"peer keys: parties {sorted(stray)[:5]} are not neighbours")
        if len(parties) < self._t:
            raise InconsistentSetsError(f"peer keys: {len(parties)} peers, below the threshold {self._t}")
        own = next((p for p in msg.peers if p.party == self.party), None)
        if own is None or own.c_pk != self._c_pk or own.s_pk != self._s_pk or own.identity != self._own_id:
            raise InconsistentSetsError("peer keys: this party's own keys are missing or altered")
        keys = [p.c_pk for p in msg.peers] + [p.s_pk for p in msg.peers]
        if len(set(keys)) != len(keys):
            raise DuplicateKeyError("peer keys: the same public key is advertised twice")
        if self._identity is not None and len({p.identity for p in msg.peers}) != len(msg.peers):
            raise DuplicateKeyError("peer keys: the same identity key is listed for two parties")
        for p in msg.peers:
            if self._leaf(p.party) != crypto.member_leaf(p.party, p.identity, p.c_pk, p.s_pk):
                raise InconsistentSetsError(f"peer keys: party {p.party}'s entry is not the one in the members list")
            if self._pinned_ids is not None and p.party != self.party and self._pinned_ids.get(p.party) != p.identity:
                raise SignatureError(f"peer keys: party {p.party}'s identity key is not the one expected")
        self._peer_ids = {p.party: p.identity for p in msg.peers}
        self._peer_tokens = {p.party: p.token for p in msg.peers}
        if self._verify:  # before any share is encrypted to them: every peer's keys must be its own
            with self._meter.measure("signatures"):
                for p in msg.peers:
                    if p.party == self.party:
                        continue
                    try:
                        crypto.verify(p.identity, p.signature, crypto.keys_payload(p.c_pk, p.s_pk), "")
                    except SignatureError:
                        raise TaskMismatchError(p.party, "its advertised keys are not signed by its identity key") from None
        untrusted = 0
        if self._credentialed is not None:  # the threshold counts only members an issuer vouched for
            trusted = sum(1 for p in msg.peers if p.party == self.party or self._counts(p.identity, p.token))
            untrusted = len(msg.peers) - trusted
            if trusted < self._t:
                raise floor.UnsafeParametersError(
                    f"threshold: {trusted} of this party's {len(msg.peers)} neighbours (itself included) hold a valid "
                    f"issuer token, below the share threshold {self._t}")
        if self._floor is not None:
            floor.check(cfg.n, cfg.resolved_degree, self._t, self._floor, untrusted=untrusted)
        self._peers = {p.party: p for p in msg.peers}
        u1 = sorted(self._peers)

        self._b_seed = self._rng.bytes(crypto.KEY_BYTES)
        with self._meter.measure("shamir"):
            b_shares = shamir.split(shamir.ints_from_secret(self._b_seed), u1, self._t, self._rng)
            s_secret = shamir.ints_from_secret(crypto.x25519_private_bytes(self._s_sk))
            s_shares = shamir.split(s_secret, u1, self._t, self._rng)
        self._own_shares = (b_shares[self.party], s_shares[self.party])
        self._channel: dict[int, bytes] = {}
        cts = []
        for v in u1:
            if v == self.party:
                continue
            with self._meter.measure("key_agreement"):
                key = crypto.channel_key(crypto.agree(self._c_sk, self._peers[v].c_pk), self._bind, self.party, v)
            self._channel[v] = key
            pt = _PLAINTEXT.pack(self.party, v, shamir.to_bytes(b_shares[v]), shamir.to_bytes(s_shares[v]))
            cts.append((v, crypto.seal_share(key, self._bind, self.party, v, pt)))
        sig = b""
        if self._identity is not None:
            with self._meter.measure("signatures"):
                sig = crypto.sign(self._identity, crypto.advertise_payload(self._bind, self.party, self._c_pk, self._s_pk))
        self.phase = Phase.SHARE_KEYS
        return ShareKeys(cfg.session_id, self.party, tuple(cts), sig, self._members_wanted()).encode()

    def _members_list(self, leaves: bytes) -> None:
        """Check this party's own leaf, compute the members root, draw the graph from it and bind what follows to it."""
        size = crypto.MEMBER_LEAF_BYTES
        if len(leaves) != self.config.n * size:
            raise InconsistentSetsError(f"members list: {len(leaves) // size} leaves for a cohort of {self.config.n}")
        self._leaves = leaves
        if self._leaf(self.party) != crypto.member_leaf(self.party, self._own_id, self._c_pk, self._s_pk):
            raise InconsistentSetsError("members list: this party's keys are missing or altered")
        root = crypto.members_root(leaves)
        graph = self.config.neighbour_graph(crypto.graph_seed(self._bind, root))
        self._nbrs = frozenset(graph.closed(self.party))
        self._bind = crypto.round_binding(self._bind, root)

    def _leaf(self, party: int) -> bytes:
        size = crypto.MEMBER_LEAF_BYTES
        if not 1 <= party <= self.config.n:
            return b""
        return self._leaves[(party - 1) * size: party * size]

    def _members_wanted(self) -> int:
        """Signed members beyond the neighbourhood to ask for: enough to reach `min_verified` even if every
        neighbour the protocol may lose (all but t) drops; none on the complete graph (everyone is a neighbour)."""
        if self._min_verified is None or self.config.uses_complete_graph:
            return 0
        return max(0, min(self.config.n, self._min_verified) - self._t)

    def _verify_cohort(self, msg: RoutedShares) -> None:
        """The members this party counts, before anything of its input is computed: each share sender — its share
        opened under a channel key its identity signed (the peer keys) and bound to this session, task and members
        root, which is what a signature over them would prove — and each member entry whose signature over its keys
        for this session and task verifies; and their count against `min_verified`."""
        cfg = self.config
        counted = {self.party: self._own_id} if self._identity is not None else {}
        for v, _ in msg.ciphertexts:
            if self._counts(self._peer_ids[v], self._peer_tokens.get(v, b"")):
                counted[v] = self._peer_ids[v]
        seen: set[int] = set()
        member_tokens = msg.member_tokens or (b"",) * len(msg.members)
        for m, token in zip(msg.members, member_tokens):
            if not 1 <= m.party <= cfg.n or m.party in self._nbrs or m.party in seen:
                raise InconsistentSetsError(f"members: party {m.party} is a neighbour, repeated or outside the cohort")
            seen.add(m.party)
            if self._leaf(m.party) != crypto.member_leaf(m.party, m.identity, m.c_pk, m.s_pk):
                raise InconsistentSetsError(f"members: party {m.party}'s entry is not the one in the members list")
            try:
                crypto.verify(m.identity, m.signature, crypto.advertise_payload(self._bind, m.party, m.c_pk, m.s_pk), "")
            except SignatureError:
                raise TaskMismatchError(m.party, "member list") from None
            if self._counts(m.identity, token):
                counted[m.party] = m.identity
        self._counted = counted
        self.verified_members = len(set(counted.values()))
        if self._min_verified is not None and self.verified_members < self._min_verified:
            raise CohortUnverifiedError(self.verified_members, self._min_verified, self._credentialed is not None)

    def _counts(self, identity: bytes, token: bytes) -> bool:
        """Whether a peer whose signature verified counts toward `min_verified`: always without `credentialed`,
        else only with a token the callback accepts."""
        if self._credentialed is None:
            return True
        with self._meter.measure("tokens"):
            return bool(token) and self._credentialed(identity, token)

    def _on_routed_shares(self, msg: RoutedShares) -> bytes:
        cfg = self.config
        senders = [s for s, _ in msg.ciphertexts]
        if len(set(senders)) != len(senders):
            raise InconsistentSetsError("routed shares: a sender is listed twice")
        stray = set(senders) - (set(self._peers) - {self.party})
        if stray:
            raise InconsistentSetsError(f"routed shares: senders {sorted(stray)[:5]} were not in the key set")
        u2 = set(senders) | {self.party}
        if len(u2) < self._t:
            raise InconsistentSetsError(f"routed shares: {len(u2)} parties, below the threshold {self._t}")
        held: dict[int, tuple[int, int]] = {}
        for v, ct in msg.ciphertexts:
            try:
                pt = crypto.open_share(self._channel[v], self._bind, v, self.party, ct)
            except DecryptionError:
                if self._verify:  # the channel key is v's (its keys' signature verified) and bound to this task
                    raise TaskMismatchError(v, share=True) from None
                raise
            if len(pt) != _PLAINTEXT.size:
                raise DecryptionError(f"share from party {v} has the wrong length")
            sender, receiver, b_share, s_share = _PLAINTEXT.unpack(pt)
            b, s = shamir.from_bytes(b_share), shamir.from_bytes(s_share)
            if (sender, receiver) != (v, self.party) or b >= shamir.PRIME or s >= shamir.PRIME:
                raise DecryptionError(f"share from party {v} names the wrong parties or is out of range")
            held[v] = (b, s)
        if self._verify:
            with self._meter.measure("signatures"):
                self._verify_cohort(msg)
        self._held = held
        self._u2 = frozenset(u2)

        stream = crypto.MaskStream(cfg.dim, cfg.work_dtype, self._meter)
        acc = self._input.copy()
        stream.add_into(acc, crypto.self_mask_key(self._b_seed, self._bind, self.party), +1)
        for v in sorted(self._u2 - {self.party}):
            with self._meter.measure("key_agreement"):
                shared = crypto.agree(self._s_sk, self._peers[v].s_pk)
                key = crypto.pair_mask_key(shared, self._bind, self.party, v)
            stream.add_into(acc, key, +1 if self.party < v else -1)
        if cfg.bits < acc.dtype.itemsize * 8:
            np.bitwise_and(acc, acc.dtype.type(cfg.modulus_mask), out=acc)
        self.phase = Phase.MASKED_INPUT
        packed = encoding.pack(acc, cfg.bits)
        if self._proof is not None:
            return MaskedInputProved(cfg.session_id, self.party, cfg.bits, cfg.dim, packed, self._proof).encode()
        return MaskedInput(cfg.session_id, self.party, cfg.bits, cfg.dim, packed).encode()

    def _survivors(self, bitmap: bytes) -> frozenset[int]:
        everyone = decode_bitmap(bitmap, self.config.n)
        if self._min_survivors is not None and len(everyone) < self._min_survivors:
            raise TooFewSurvivorsError(len(everyone), self._min_survivors)
        u3 = everyone & self._nbrs
        if self.party not in u3:
            raise InconsistentSetsError("survivors: this party is missing from the survivor set")
        if not u3 <= self._u2:
            raise InconsistentSetsError("survivors: not a subset of the parties that shared keys")
        if len(u3) < self._t:
            raise InconsistentSetsError(f"survivors: {len(u3)} neighbours, below the threshold {self._t}")
        if self._min_verified is not None:  # only members whose input the survivor set says is in the sum
            listed = len({identity for p, identity in self._counted.items() if p in everyone})
            if listed < self._min_verified:
                raise CohortUnverifiedError(listed, self._min_verified, self._credentialed is not None)
        return u3

    def _on_consistency_request(self, msg: ConsistencyRequest) -> bytes:
        self._survivors(msg.survivors)
        self._signed_survivors = msg.survivors
        sig = crypto.sign(self._identity, crypto.consistency_payload(self._bind, msg.survivors))  # type: ignore[arg-type]
        self.phase = Phase.CONSISTENCY_CHECK
        return ConsistencySignature(self.config.session_id, self.party, sig).encode()

    def _on_unmask_request(self, msg: UnmaskRequest) -> bytes:
        cfg = self.config
        u3 = self._survivors(msg.survivors)
        if cfg.active:
            if msg.survivors != self._signed_survivors:
                raise InconsistentSurvivorsError("survivors: differ from the set this party signed")
            signers = [p for p, _ in msg.signatures]
            if len(set(signers)) != len(signers) or not set(signers) <= u3:
                raise InconsistentSurvivorsError("consistency: signatures from repeated or non-surviving parties")
            payload = crypto.consistency_payload(self._bind, msg.survivors)
            with self._meter.measure("signatures"):
                for signer, sig in msg.signatures[: self._t]:  # t valid ones are the proof; the rest are not read
                    try:
                        crypto.verify(self._peer_ids[signer], sig, payload, f"party {signer}'s consistency check")
                    except SignatureError as exc:
                        raise InconsistentSurvivorsError(str(exc)) from None
            if len(signers) < self._t:
                raise InconsistentSurvivorsError(
                    f"consistency: {len(signers)} neighbours signed this survivor set, below the threshold {self._t}: "
                    "the others may have been shown another set")
        decisions = {
            v: ShareKind.SELF_MASK_SEED if v in u3 else ShareKind.MASK_KEY for v in sorted(self._u2)
        }
        for v, kind in decisions.items():
            if self._revealed.get(v, kind) != kind:
                raise DoubleRevealError(f"server asks for the other share of party {v} after one was revealed")
        out = []
        for v, kind in decisions.items():
            b, s = self._own_shares if v == self.party else self._held[v]
            out.append((v, int(kind), shamir.to_bytes(b if kind is ShareKind.SELF_MASK_SEED else s)))
        self._revealed.update(decisions)
        self.phase = Phase.DONE
        return UnmaskShares(cfg.session_id, self.party, tuple(out)).encode()


__all__ = ["ClientSession", "ProtocolError"]
