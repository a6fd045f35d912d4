"""Adversarial tests of the secure-aggregation state machines.

Each test plays a malicious server (towards a client) or a malicious / confused device (towards the
server) by intercepting the real protocol bytes, altering them with `dataclasses.replace(...).encode()`
and checking that the targeted defence rejects them with its typed error. Where it is natural, a
counterpart test removes the defence with `monkeypatch` and shows that the attack then succeeds (the
server recovers one party's input, or reads a share meant for another party), so the defence is shown
to be what stops it.

Cohorts: n=5 semi-honest on the complete graph (threshold t=3), n=7 active (t=5), and n=30 on a
sparse graph of degree 6 (t=4). As the service runs them (device protocol 3), every party has an identity key,
signs its fresh keys in AdvertiseKeys (the server verifies that signature and relays it in each PeerKeys entry, with
the party's identity key and the members list: one leaf per party over its identity and keys; every party checks its
own leaf, each entry against its leaf and each peer's key signature before it encrypts a share to it, and draws its
graph from the list's root), and signs its advertised keys again, bound to the session, the task digest and the
members root, in its ShareKeys; the server verifies those signatures (and shows them only in member entries), and every
party opens its senders' shares — under channel keys agreed with their signed keys and bound to session, task and
members root — before it masks: a share that does not open is TaskMismatchError naming its sender
(`make_cohort(signed=False)`: a session without identities). Task binding itself: test_task_binding.py; the members
list and the safety floor: test_members.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from dataclasses import dataclass, field

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from secagg import (
    ClientSession,
    ConfigError,
    ConflictError,
    DecryptionError,
    DoubleRevealError,
    DuplicateKeyError,
    InconsistentSetsError,
    MessageFormatError,
    SecAggConfig,
    ServerSession,
    SignatureError,
    TaskMismatchError,
    TooFewSurvivorsError,
    UnknownPartyError,
    WrongPhaseError,
    WrongSessionError,
    crypto,
    encoding,
    shamir,
)
from secagg.errors import InconsistentSurvivorsError
from secagg.messages import (
    AdvertiseKeys,
    ConsistencySignature,
    PeerKeys,
    RoutedShares,
    ShareKeys,
    ShareKind,
    UnmaskRequest,
    UnmaskShares,
    decode,
    encode_bitmap,
)
from secagg.phases import Phase
from tests.secagg.members_lists import relisted, view_binding
from tests.secagg.test_task_binding import mask_spy, seal_spy

DIM, BITS = 4, 16
DIGEST = hashlib.sha256(b"test_adversarial/task").digest()
"""The task digest every party of these cohorts computed (the same for all: an honest task)."""


@dataclass
class Cohort:
    """Every party of one session, driven by hand so that messages can be intercepted."""

    cfg: SecAggConfig
    inputs: dict[int, np.ndarray]
    clients: dict[int, ClientSession]
    server: ServerSession
    identities: dict[int, Ed25519PrivateKey] = field(default_factory=dict)
    digest: bytes = DIGEST
    server_messages: dict[int, bytes] = field(default_factory=dict)
    """The server's last messages, where a test keeps them."""

    @property
    def sid(self) -> bytes:
        return self.cfg.session_id

    @property
    def bind(self) -> bytes:
        """What the graph seed is bound to: session id ‖ task digest."""
        return crypto.binding(self.sid, self.digest)

    @property
    def round_bind(self) -> bytes:
        """What keys, associated data and signatures are bound to once phase 0 closed: session id ‖ task digest ‖
        members root (as the server fixed it)."""
        assert self.server.members_root is not None, "the members root is fixed when phase 0 closes"
        return crypto.round_binding(self.bind, self.server.members_root)

    @property
    def public_ids(self) -> dict[int, bytes]:
        return {p: crypto.ed25519_public_bytes(k) for p, k in self.identities.items()}

    @property
    def t(self) -> int:
        return self.cfg.share_threshold

    def advance(self, outgoing: dict[int, bytes]) -> dict[int, bytes]:
        """The server takes the parties' messages and closes the phase; returns its next messages."""
        for p, msg in outgoing.items():
            self.server.receive(p, msg)
        return self.server.close_phase()

    def reply(self, incoming: dict[int, bytes], skip: frozenset[int] | set[int] = frozenset()) -> dict[int, bytes]:
        return {p: self.clients[p].receive(m) for p, m in incoming.items() if p not in skip}

    def bitmap(self, members: set[int]) -> bytes:
        return encode_bitmap(set(members), self.cfg.n)

    def sign_survivors(self, signer: int, bitmap: bytes) -> bytes:
        return crypto.sign(self.identities[signer], crypto.consistency_payload(self.round_bind, bitmap))

    def sign_advert(self, signer: int, c_pk: bytes, s_pk: bytes) -> bytes:
        """`signer`'s identity signature over bare keys, as AdvertiseKeys and PeerKeys entries carry it."""
        return crypto.sign(self.identities[signer], crypto.keys_payload(c_pk, s_pk))

    def sign_keys(self, signer: int, party: int, c_pk: bytes, s_pk: bytes, bind: bytes | None = None) -> bytes:
        """`signer`'s identity signature over `party`'s advertised keys (bound to this session, task and members
        root)."""
        return crypto.sign(self.identities[signer], crypto.advertise_payload(bind or self.round_bind, party, c_pk, s_pk))


def make_cohort(
    n: int = 5, *, active: bool = False, graph: str = "auto", degree: int | None = None, sid: bytes | None = None,
    signed: bool = True, digest: bytes = DIGEST,
) -> Cohort:
    cfg = SecAggConfig(
        sid or os.urandom(16), n, DIM, BITS, graph=graph, degree=degree,
        threat_model="active" if active else "semi_honest",
    )  # fmt: skip
    rng = np.random.default_rng(n)
    inputs = {p: rng.integers(0, 1 << BITS, DIM, dtype=np.uint64) for p in range(1, n + 1)}
    identities: dict[int, Ed25519PrivateKey] = {}
    public_ids = None
    if signed or active:
        identities = {p: Ed25519PrivateKey.generate() for p in inputs}
        public_ids = {p: crypto.ed25519_public_bytes(k) for p, k in identities.items()}
    clients = {
        p: ClientSession(cfg, p, v, identities.get(p), public_ids, task_digest=digest) for p, v in inputs.items()
    }
    return Cohort(cfg, inputs, clients, ServerSession(cfg, public_ids, task_digest=digest), identities, digest)


def keep_senders(routed: RoutedShares, keep) -> RoutedShares:
    """`routed` with only the ciphertexts of senders in `keep`."""
    return dataclasses.replace(routed, ciphertexts=tuple(x for x in routed.ciphertexts if x[0] in keep))


@dataclass
class Transcript:
    """What a server holds after the masked-input phase (semi-honest) or consistency check (active)."""

    cohort: Cohort
    adverts: dict[int, bytes]
    peer_keys: dict[int, bytes]
    share_keys: dict[int, bytes]
    routed: dict[int, bytes]
    masked: dict[int, bytes]
    unmask_requests: dict[int, bytes]
    consistency_requests: dict[int, bytes] = field(default_factory=dict)
    signatures: dict[int, bytes] = field(default_factory=dict)


def run_to_unmasking(cohort: Cohort, drop_before_input: set[int] = frozenset()) -> Transcript:
    c = cohort
    adverts = {p: cl.start() for p, cl in c.clients.items()}
    peer_keys = c.advance(adverts)
    share_keys = c.reply(peer_keys)
    routed = c.advance(share_keys)
    masked = c.reply(routed, skip=drop_before_input)
    after_input = c.advance(masked)
    if not c.cfg.active:
        return Transcript(c, adverts, peer_keys, share_keys, routed, masked, after_input)
    sigs = c.reply(after_input)
    unmask = c.advance(sigs)
    return Transcript(c, adverts, peer_keys, share_keys, routed, masked, unmask, after_input, sigs)


def flip(data: bytes, index: int) -> bytes:
    out = bytearray(data)
    out[index] ^= 0x01
    return bytes(out)


def expect_abandoned(client: ClientSession) -> None:
    """After a fatal violation the client answers nothing more in this session."""
    assert client.phase is Phase.ABORTED


# ---------------------------------------------------------------------------------------------------
# 1. The client checks the sets the server shows it.
# ---------------------------------------------------------------------------------------------------


def _to_share_keys() -> tuple[Cohort, dict[int, bytes]]:
    c = make_cohort()
    return c, c.advance({p: cl.start() for p, cl in c.clients.items()})


def test_client_rejects_peer_keys_below_threshold():
    c, peer_keys = _to_share_keys()
    msg = decode(peer_keys[1])
    short = dataclasses.replace(msg, peers=tuple(p for p in msg.peers if p.party in (1, 2)))
    assert len(short.peers) < c.t
    with pytest.raises(InconsistentSetsError, match="below the threshold"):
        c.clients[1].receive(short.encode())
    expect_abandoned(c.clients[1])


def test_client_rejects_peer_keys_that_alter_its_own_keys():
    c, peer_keys = _to_share_keys()
    msg = decode(peer_keys[1])
    _, fake = crypto.x25519_keypair()
    peers = tuple(dataclasses.replace(p, c_pk=fake) if p.party == 1 else p for p in msg.peers)
    with pytest.raises(InconsistentSetsError, match="own keys"):
        c.clients[1].receive(dataclasses.replace(msg, peers=peers).encode())


def test_client_rejects_peer_keys_naming_a_non_neighbour():
    """SecAgg+: the graph is recomputed by each client from the members root, so the server cannot add a stranger —
    not even one whose entry is genuine (its identity, keys and key signature, matching its leaf)."""
    c = make_cohort(30, graph="sparse", degree=6)
    peer_keys = c.advance({p: cl.start() for p, cl in c.clients.items()})
    msg = decode(peer_keys[1])
    assert {e.party for e in msg.peers} == set(c.server.graph.closed(1))
    stranger = next(p for p in range(1, 31) if p not in c.server.graph.closed(1))
    genuine = next(e for e in decode(peer_keys[stranger]).peers if e.party == stranger)
    with pytest.raises(InconsistentSetsError, match="not neighbours"):
        c.clients[1].receive(dataclasses.replace(msg, peers=msg.peers + (genuine,)).encode())
    expect_abandoned(c.clients[1])


def test_client_rejects_routed_shares_from_a_sender_outside_its_key_set():
    c, peer_keys = _to_share_keys()
    # Party 1 is shown keys of {1, 2, 3, 4} only; everyone else sees the whole cohort.
    pk1 = decode(peer_keys[1])
    peer_keys[1] = dataclasses.replace(pk1, peers=tuple(p for p in pk1.peers if p.party != 5)).encode()
    share_keys = c.reply(peer_keys)
    sk5 = dict(decode(share_keys[5]).ciphertexts)
    # The server routes party 5's (genuine) ciphertext for party 1 although 5 was not in 1's key set.
    others = [(u, dict(decode(share_keys[u]).ciphertexts)[1]) for u in (2, 3, 4)]
    injected = RoutedShares(c.sid, 1, tuple(others + [(5, sk5[1])]))
    with pytest.raises(InconsistentSetsError, match="not in the key set"):
        c.clients[1].receive(injected.encode())
    expect_abandoned(c.clients[1])


def test_client_rejects_routed_shares_below_threshold():
    c, peer_keys = _to_share_keys()
    share_keys = c.reply(peer_keys)
    routed = decode(c.advance(share_keys)[1])
    short = keep_senders(routed, {routed.ciphertexts[0][0]})  # U2 = {1, one sender} < t
    with pytest.raises(InconsistentSetsError, match="below the threshold"):
        c.clients[1].receive(short.encode())
    expect_abandoned(c.clients[1])


def _client1_with_u2_without_5() -> Cohort:
    """Everyone has sent a masked input; party 1 got shares from {2, 3, 4} only, so its U2 is {1..4}."""
    c, peer_keys = _to_share_keys()
    routed = c.advance(c.reply(peer_keys))
    routed[1] = keep_senders(decode(routed[1]), {2, 3, 4}).encode()
    c.reply(routed)
    return c


@pytest.mark.parametrize(
    ("survivors", "reason"),
    [
        ({1, 2, 3, 4, 5}, "not a subset"),  # 5 never shared keys with party 1
        ({2, 3, 4}, "missing"),  # omits party 1: it would reveal its own mask-key share
        ({1, 2}, "below the threshold"),
    ],
    ids=["not-subset-of-U2", "omits-self", "below-threshold"],
)
def test_client_rejects_inconsistent_survivor_sets(survivors, reason):
    c = _client1_with_u2_without_5()
    request = UnmaskRequest(c.sid, 1, c.bitmap(survivors), ())
    with pytest.raises(InconsistentSetsError, match=reason):
        c.clients[1].receive(request.encode())
    expect_abandoned(c.clients[1])


@pytest.mark.parametrize("active", [False, True], ids=["semi-honest", "active"])
def test_client_with_its_own_minimum_refuses_a_shrunk_survivor_set(active):
    """`min_survivors` is the device's own floor (its policy, the t_min of its noise): a survivor set the
    server could legitimately close with (≥ the Shamir threshold) but below that floor is refused before the
    party signs it (active) or reveals any share; the whole cohort is counted, not only the neighbourhood."""
    for minimum, refused in ((7, True), (6, False)):
        c = make_cohort(8, active=active)
        c.clients[1] = ClientSession(c.cfg, 1, c.inputs[1], c.identities[1], c.public_ids, min_survivors=minimum,
                                     task_digest=c.digest)
        routed = c.advance(c.reply(c.advance({p: cl.start() for p, cl in c.clients.items()})))
        after_input = c.advance(c.reply(routed, skip={7, 8}))  # 6 survivors: at or above the threshold (5 / 6)
        assert len(c.server.survivors(Phase.MASKED_INPUT)) == 6 >= c.t
        if refused:
            with pytest.raises(TooFewSurvivorsError, match="6 parties, below this party's minimum of 7"):
                c.clients[1].receive(after_input[1])
            expect_abandoned(c.clients[1])
        else:
            assert c.clients[1].receive(after_input[1]) is not None


# ---------------------------------------------------------------------------------------------------
# 2. The client never reveals both shares of one peer; identical retries get identical replies.
# ---------------------------------------------------------------------------------------------------


def test_client_refuses_to_reveal_the_other_share_of_a_peer():
    c = make_cohort()
    tr = run_to_unmasking(c)
    first = c.clients[1].receive(tr.unmask_requests[1])
    assert {(v, k) for v, k, _ in decode(first).shares} >= {(5, ShareKind.SELF_MASK_SEED)}
    altered = UnmaskRequest(c.sid, 1, c.bitmap({1, 2, 3, 4}), ())  # now claims 5 dropped
    with pytest.raises(DoubleRevealError, match="party 5"):
        c.clients[1].receive(altered.encode())
    expect_abandoned(c.clients[1])


def test_identical_retries_get_byte_identical_replies():
    c = make_cohort()
    adverts = {p: cl.start() for p, cl in c.clients.items()}
    assert c.clients[1].start() == adverts[1]
    peer_keys = c.advance(adverts)
    share_keys = c.reply(peer_keys)
    assert c.clients[1].receive(peer_keys[1]) == share_keys[1]  # no fresh polynomial, no new seed
    routed = c.advance(share_keys)
    masked = c.reply(routed)
    assert c.clients[1].receive(routed[1]) == masked[1]
    requests = c.advance(masked)
    shares = c.reply(requests)
    assert c.clients[1].receive(requests[1]) == shares[1]
    assert c.clients[1].receive(requests[1]) == shares[1]
    c.advance(shares)
    assert np.array_equal(c.server.result.vector, _plain_sum(c, range(1, 6)))


def _plain_sum(c: Cohort, parties) -> np.ndarray:
    return sum(c.inputs[p] for p in parties) & np.uint64(c.cfg.modulus_mask)


def _unmask_party(tr: Transcript, v: int, b_shares: dict[int, int], s_shares: dict[int, int]) -> np.ndarray:
    """What a server can do with t self-mask shares and t key shares of v: strip v's masks."""
    c = tr.cohort
    cfg = c.cfg
    rec = shamir.BatchReconstructor(c.t)
    seed = shamir.secret_from_int(rec.reconstruct(b_shares, "b", "attack"))
    s_sk = X25519PrivateKey.from_private_bytes(shamir.secret_from_int(rec.reconstruct(s_shares, "s", "attack")))
    y = encoding.unpack(decode(tr.masked[v]).packed, cfg.dim, cfg.bits, cfg.work_dtype).copy()
    stream = crypto.MaskStream(cfg.dim, cfg.work_dtype)
    stream.add_into(y, crypto.self_mask_key(seed, c.round_bind, v), -1)
    for u in sorted(tr.adverts):
        if u != v:
            shared = s_sk.exchange(X25519PublicKey.from_public_bytes(decode(tr.adverts[u]).s_pk))
            stream.add_into(y, crypto.pair_mask_key(shared, c.round_bind, v, u), -1 if v < u else +1)
    return y.astype(np.uint64) & np.uint64(cfg.modulus_mask)


def _double_reveal_attack(c: Cohort) -> tuple[Transcript, dict[int, int], dict[int, int]]:
    """Server asks t parties for v=5's self-mask share (5 survived), then for its key share (5 'dropped')."""
    tr = run_to_unmasking(c)
    b_shares, s_shares = {}, {}
    for w in (1, 2, 3):
        for v, kind, share in decode(c.clients[w].receive(tr.unmask_requests[w])).shares:
            if v == 5 and kind == ShareKind.SELF_MASK_SEED:
                b_shares[w] = shamir.from_bytes(share)
        try:
            reply = c.clients[w].receive(UnmaskRequest(c.sid, w, c.bitmap({1, 2, 3, 4}), ()).encode())
        except DoubleRevealError:
            continue
        for v, kind, share in decode(reply).shares:
            if v == 5 and kind == ShareKind.MASK_KEY:
                s_shares[w] = shamir.from_bytes(share)
    return tr, b_shares, s_shares


def test_double_reveal_attack_yields_no_key_shares():
    c = make_cohort()
    _, b_shares, s_shares = _double_reveal_attack(c)
    assert len(b_shares) == c.t and s_shares == {}


class _Amnesia(dict):
    """A reveal log that forgets everything: the client without double-reveal tracking."""

    def get(self, key, default=None):
        return default

    def update(self, *args, **kwargs):
        pass


def test_without_double_reveal_tracking_the_server_recovers_a_single_input(monkeypatch):
    """Counterpart: remove the tracking and the same attack unmasks party 5's individual input."""
    c = make_cohort()
    for w in (1, 2, 3):
        monkeypatch.setattr(c.clients[w], "_revealed", _Amnesia())
    tr, b_shares, s_shares = _double_reveal_attack(c)
    assert len(b_shares) == len(s_shares) == c.t
    assert np.array_equal(_unmask_party(tr, 5, b_shares, s_shares), c.inputs[5])


# ---------------------------------------------------------------------------------------------------
# 3. Duplicate public keys.
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("signed", [True, False], ids=["signed", "unsigned"])
def test_server_rejects_a_public_key_already_advertised(signed):
    """A key already advertised (by another party, or as the party's other key) is refused — even when the party
    properly signed it (a device may sign whatever keys it likes; the duplicate check does not rest on signatures)."""
    c = make_cohort(signed=signed)
    a1 = decode(c.clients[1].start())
    c.server.receive(1, a1.encode())
    a2 = decode(c.clients[2].start())
    for c_pk, s_pk in ((a1.c_pk, a2.s_pk), (a2.c_pk, a1.s_pk), (a2.c_pk, a1.c_pk), (a2.c_pk, a2.c_pk)):
        sig = c.sign_advert(2, c_pk, s_pk) if signed else b""
        with pytest.raises(DuplicateKeyError):
            c.server.receive(2, dataclasses.replace(a2, c_pk=c_pk, s_pk=s_pk, signature=sig).encode())
    c.server.receive(2, a2.encode())  # the party's genuine keys are still accepted
    assert c.server.received() == {1, 2}


@pytest.mark.parametrize("active", [False, True], ids=["semi-honest", "active"])
def test_server_refuses_advertise_keys_without_a_valid_key_signature(active):
    """With identities, the server verifies each AdvertiseKeys signature over the party's bare keys before it
    records them (and so before relaying them in any PeerKeys): a missing or bad one is SignatureError naming the
    party, nothing is recorded, and the party's genuine message is still accepted."""
    c = make_cohort(7, active=active)
    a1 = decode(c.clients[1].start())
    assert len(a1.signature) == 64
    crypto.verify(c.public_ids[1], a1.signature, crypto.keys_payload(a1.c_pk, a1.s_pk), "party 1's keys")
    _, fake = crypto.x25519_keypair()
    for bad in (
        b"",  # missing
        flip(a1.signature, 5),
        c.sign_advert(1, fake, a1.s_pk),  # its identity, over other keys
        c.sign_advert(1, a1.s_pk, a1.c_pk),  # its keys swapped
        c.sign_advert(2, a1.c_pk, a1.s_pk),  # another party's identity
        c.sign_keys(1, 1, a1.c_pk, a1.s_pk, c.bind),  # a session-bound ShareKeys signature: another payload
    ):
        with pytest.raises(SignatureError, match="party 1"):
            c.server.receive(1, dataclasses.replace(a1, signature=bad).encode())
        assert c.server.received() == set()
    with pytest.raises(SignatureError, match="party 1"):  # another party's genuine advert, sent as party 1's
        c.server.receive(1, dataclasses.replace(decode(c.clients[2].start()), party=1).encode())
    c.server.receive(1, a1.encode())
    assert c.server.received() == {1}


def test_server_relays_each_party_s_key_signature_in_peer_keys():
    """Every PeerKeys entry carries its party's signature over exactly those keys, as the server received it."""
    c = make_cohort(7)
    adverts = {p: decode(cl.start()) for p, cl in c.clients.items()}
    peer_keys = c.advance({p: a.encode() for p, a in adverts.items()})
    for msg in peer_keys.values():
        for e in decode(msg).peers:
            assert (e.c_pk, e.s_pk, e.signature) == (adverts[e.party].c_pk, adverts[e.party].s_pk,
                                                     adverts[e.party].signature)
            crypto.verify(c.public_ids[e.party], e.signature, crypto.keys_payload(e.c_pk, e.s_pk), "keys")


def test_client_rejects_peer_keys_with_a_repeated_key():
    for target, source_party, source_field in (("c_pk", 2, "c_pk"), ("s_pk", 2, "s_pk"), ("s_pk", 3, "c_pk")):
        c, peer_keys = _to_share_keys()
        msg = decode(peer_keys[1])
        copied = getattr(next(p for p in msg.peers if p.party == source_party), source_field)
        peers = tuple(dataclasses.replace(p, **{target: copied}) if p.party == 3 else p for p in msg.peers)
        with pytest.raises(DuplicateKeyError):
            c.clients[1].receive(dataclasses.replace(msg, peers=peers).encode())
        expect_abandoned(c.clients[1])


# ---------------------------------------------------------------------------------------------------
# 4. Signatures: over each party's keys (AdvertiseKeys / PeerKeys and ShareKeys, every threat model) and over the
#    survivor set (active threat model).
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("active", [False, True], ids=["semi-honest", "active"])
def test_server_rejects_bad_key_signatures_in_share_keys(active):
    """The server verifies each ShareKeys signature over the party's advertised keys (bound to session and task)
    before relaying anything: a bad one is refused, the party's genuine message is still accepted."""
    c = make_cohort(7, active=active)
    adverts = {p: cl.start() for p, cl in c.clients.items()}
    share_keys = c.reply(c.advance(adverts))
    s1, a1 = decode(share_keys[1]), decode(adverts[1])
    _, fake = crypto.x25519_keypair()
    for bad in (
        flip(s1.signature, 7),
        c.sign_keys(1, 1, fake, a1.s_pk),  # its identity, but over other keys than it advertised
        c.sign_keys(1, 1, a1.s_pk, a1.c_pk),  # its keys swapped
        c.sign_keys(1, 2, a1.c_pk, a1.s_pk),  # its keys, signed as party 2's
        c.sign_keys(2, 1, a1.c_pk, a1.s_pk),  # signed by another party's identity
        c.sign_keys(1, 1, a1.c_pk, a1.s_pk, crypto.binding(os.urandom(16), c.digest)),  # another session
        c.sign_keys(1, 1, a1.c_pk, a1.s_pk, crypto.binding(c.sid, bytes(32))),  # no task / another task
        c.sign_keys(1, 1, a1.c_pk, a1.s_pk, c.bind),  # session and task, without the members root
        c.sign_keys(1, 1, a1.c_pk, a1.s_pk, crypto.round_binding(c.bind, bytes(32))),  # another members root
        b"",
    ):
        with pytest.raises(SignatureError, match="party 1"):
            c.server.receive(1, dataclasses.replace(s1, signature=bad).encode())
    c.server.receive(1, share_keys[1])
    assert c.server.received() == {1}


def test_server_without_identity_keys_accepts_unsigned_share_keys():
    """A session without identities (protocol tests, benchmarks): nothing to sign or verify, the sum is exact."""
    c = make_cohort(5, signed=False)
    tr = run_to_unmasking(c)
    assert all(decode(m).signature == b"" for m in tr.adverts.values())
    assert all(e.signature == b"" for m in tr.peer_keys.values() for e in decode(m).peers)
    assert all(decode(m).signature == b"" for m in tr.share_keys.values())
    assert all(decode(m).members == () for m in tr.routed.values())
    c.advance(c.reply(tr.unmask_requests))
    assert np.array_equal(c.server.result.vector, _plain_sum(c, range(1, 6)))


def _active_peer_keys() -> tuple[Cohort, PeerKeys]:
    c = make_cohort(7, active=True)
    c.server_messages = c.advance({p: cl.start() for p, cl in c.clients.items()})
    return c, decode(c.server_messages[1])


def _swap_keys_of(msg: PeerKeys, party: int, c_pk: bytes, s_pk: bytes | None = None, *, relist: bool = True) -> bytes:
    """`msg` with party's keys replaced — and its leaf in the members list with them (`relist`: the server's
    consistent lie, caught by the key signature) or not (caught by the leaf check)."""
    peers = tuple(dataclasses.replace(p, c_pk=c_pk, s_pk=s_pk or p.s_pk) if p.party == party else p for p in msg.peers)
    return (relisted(msg, peers) if relist else dataclasses.replace(msg, peers=peers)).encode()


@pytest.mark.parametrize("relist", [False, True], ids=["entry", "entry-and-leaf"])
@pytest.mark.parametrize("active", [False, True], ids=["semi-honest", "active"])
@pytest.mark.parametrize("which", ["c_pk", "s_pk", "both"])
def test_client_rejects_peer_keys_with_a_substituted_peer_key(active, which, relist):
    """The server shows party 1 its own key in place of party 3's, relaying party 3's genuine key signature. Party 1
    checks, at PeerKeys and before it encrypts any share, each entry against its leaf in the members list and each
    peer's signature over the keys it was shown. The entry alone altered: its leaf does not match
    (InconsistentSetsError naming party 3). The leaf rewritten with it: party 3's key signature does not verify
    (TaskMismatchError naming party 3). Either way no ShareKeys and not one share sealed."""
    c = make_cohort(7, active=active)
    peer_keys = c.advance({p: cl.start() for p, cl in c.clients.items()})
    msg = decode(peer_keys[1])
    _, server_c = crypto.x25519_keypair()
    _, server_s = crypto.x25519_keypair()
    genuine = next(p for p in msg.peers if p.party == 3)
    c_pk = genuine.c_pk if which == "s_pk" else server_c
    s_pk = genuine.s_pk if which == "c_pk" else server_s
    shown = _swap_keys_of(msg, 3, c_pk, s_pk, relist=relist)
    with seal_spy() as sealed:
        if relist:
            with pytest.raises(TaskMismatchError, match="party 3") as err:
                c.clients[1].receive(shown)
            assert err.value.party == 3 and "not signed by its identity key" in str(err.value)
        else:
            with pytest.raises(InconsistentSetsError, match="party 3's entry is not the one in the members list"):
                c.clients[1].receive(shown)
        expect_abandoned(c.clients[1])
        with pytest.raises(WrongPhaseError):
            c.clients[1].receive(shown)  # no retry yields a ShareKeys either
    assert sealed == []


@pytest.mark.parametrize("signature", ["another-identity", "genuine-for-the-genuine-keys", "empty"])
def test_a_server_cannot_make_a_substituted_key_pass_with_a_signature_of_its_own(signature):
    """The server cannot sign for party 3: a signature over the substituted keys by another identity (party 2's, as
    if colluding), party 3's genuine signature over its genuine keys, or none — each fails against party 3's identity
    key, before party 1 seals a share."""
    c, msg = _active_peer_keys()
    _, server_c = crypto.x25519_keypair()
    genuine = next(p for p in msg.peers if p.party == 3)
    sig = {"another-identity": c.sign_advert(2, server_c, genuine.s_pk),
           "genuine-for-the-genuine-keys": genuine.signature, "empty": b""}[signature]
    peers = tuple(dataclasses.replace(p, c_pk=server_c, signature=sig) if p.party == 3 else p for p in msg.peers)
    with seal_spy() as sealed:
        with pytest.raises(TaskMismatchError, match="party 3"):
            c.clients[1].receive(relisted(msg, peers).encode())  # the members list rewritten to match
    assert sealed == []
    expect_abandoned(c.clients[1])


@pytest.mark.parametrize("pinned", ["missing", "another-key"])
def test_client_with_pinned_identities_refuses_peer_keys_naming_another_identity(pinned):
    """`peer_identity_keys` (optional since protocol 3: devices learn identities from the members list) pins each
    peer's identity: a PeerKeys entry — and its leaf — for party 4 under an identity other than the pinned one (or with
    none pinned) is a SignatureError naming party 4, before any share is sealed."""
    c = make_cohort(7, active=True)
    ids = {p: k for p, k in c.public_ids.items() if p != 4}
    if pinned == "another-key":
        ids[4] = crypto.ed25519_public_bytes(Ed25519PrivateKey.generate())
    c.clients[1] = ClientSession(c.cfg, 1, c.inputs[1], c.identities[1], ids, task_digest=c.digest)
    peer_keys = c.advance({p: cl.start() for p, cl in c.clients.items()})
    with seal_spy() as sealed:
        with pytest.raises(SignatureError, match="party 4's identity key is not the one expected"):
            c.clients[1].receive(peer_keys[1])
    assert sealed == []
    expect_abandoned(c.clients[1])


def test_without_key_signatures_a_key_substituting_server_unmasks_one_input():
    """Counterpart: with the checks off (verify_peers=False), a server that shows party 1 its own keys for every peer —
    and a members list rewritten to match, so the leaves check out — decrypts all of party 1's shares (so learns b_1),
    answers with RoutedShares it made itself, and — knowing every pairwise mask key of party 1 and the root of the
    list it showed (party 1's binding) — strips party 1's masks from its masked input: the individual input is
    exposed. The same attack against a checking client ends at PeerKeys (TaskMismatchError: the substituted keys carry
    no valid key signature), before it seals a single share, so the server has nothing to decrypt."""
    for verify in (False, True):
        c = make_cohort(5)
        c.clients[1] = ClientSession(c.cfg, 1, c.inputs[1], c.identities[1], c.public_ids, task_digest=c.digest,
                                     verify_peers=verify)
        adverts = {p: cl.start() for p, cl in c.clients.items()}
        msg = decode(c.advance(adverts)[1])
        own = next(p for p in msg.peers if p.party == 1)
        fakes = {v: (crypto.x25519_keypair(), crypto.x25519_keypair()) for v in (2, 3, 4, 5)}
        shown = relisted(msg, (own, *(
            dataclasses.replace(p, c_pk=fakes[p.party][0][1], s_pk=fakes[p.party][1][1])
            for p in msg.peers if p.party != 1
        )))
        bind = view_binding(c.bind, shown)  # party 1's binding from here on: the root of the list it was shown
        assert bind != c.round_bind
        if verify:
            with seal_spy() as sealed:
                with pytest.raises(TaskMismatchError, match="not signed by its identity key") as err:
                    c.clients[1].receive(shown.encode())
            assert err.value.party == 2 and sealed == []  # the first substituted peer; no share left party 1
            expect_abandoned(c.clients[1])
            continue
        share_1 = decode(c.clients[1].receive(shown.encode()))
        # The server decrypts every share party 1 sent (each under a channel key it agreed as the "peer").
        b_shares, cts_back = {}, []
        for v, ct in share_1.ciphertexts:
            key = crypto.channel_key(crypto.agree(fakes[v][0][0], own.c_pk), bind, 1, v)
            pt = crypto.open_share(key, bind, 1, v, ct)
            b_shares[v] = shamir.from_bytes(pt[8:41])
            # … and sends party 1 a share "from" v under the same key (any share will do): it opens, since the
            # server holds the "peer's" side of that channel
            fake_pt = v.to_bytes(4, "big") + (1).to_bytes(4, "big") + bytes(66)
            cts_back.append((v, crypto.seal_share(key, bind, v, 1, fake_pt)))
        forged = RoutedShares(c.sid, 1, tuple(cts_back))
        masked = decode(c.clients[1].receive(forged.encode()))
        b_1 = shamir.secret_from_int(shamir.BatchReconstructor(c.t).reconstruct(
            {v: b_shares[v] for v in (2, 3, 4)}, "b", "attack"))
        y = encoding.unpack(masked.packed, c.cfg.dim, c.cfg.bits, c.cfg.work_dtype).copy()
        stream = crypto.MaskStream(c.cfg.dim, c.cfg.work_dtype)
        stream.add_into(y, crypto.self_mask_key(b_1, bind, 1), -1)
        for v in (2, 3, 4, 5):
            shared = crypto.agree(fakes[v][1][0], own.s_pk)
            stream.add_into(y, crypto.pair_mask_key(shared, bind, 1, v), -1)  # party 1 < v added +mask
        assert np.array_equal(y.astype(np.uint64) & np.uint64(c.cfg.modulus_mask), c.inputs[1])


def test_a_substituted_channel_key_exposes_no_share_to_a_checking_client():
    """What the key signatures in PeerKeys prevent: a server that substitutes its own channel key for party 3's
    would read the shares party 1 encrypts for party 3 (one share of b_1 and of s_1 per substituted peer) — even if it
    then reported party 3 dropped, so that no share from party 3 is ever opened (the regression in
    test_task_binding.py, section 7). A checking party 1 verifies party 3's key signature at PeerKeys and stops
    before sealing any share (and with the members list left as it was, at the leaf of party 3's entry). Counterpart
    (verify_peers=False, the list rewritten to match): the share for party 3 is readable by the server."""
    c, msg = _active_peer_keys()
    server_sk, server_pk = crypto.x25519_keypair()
    with seal_spy() as sealed:
        with pytest.raises(TaskMismatchError, match="party 3"):
            c.clients[1].receive(_swap_keys_of(msg, 3, server_pk))
        c2, msg2 = _active_peer_keys()
        with pytest.raises(InconsistentSetsError, match="party 3's entry"):
            c2.clients[1].receive(_swap_keys_of(msg2, 3, server_pk, relist=False))
    assert sealed == []
    expect_abandoned(c.clients[1])

    c = make_cohort(7, active=True)
    c.clients[1] = ClientSession(c.cfg, 1, c.inputs[1], c.identities[1], c.public_ids, task_digest=c.digest,
                                 verify_peers=False)
    c.server_messages = c.advance({p: cl.start() for p, cl in c.clients.items()})
    msg = decode(c.server_messages[1])
    shown = _swap_keys_of(msg, 3, server_pk)
    share_keys_1 = decode(c.clients[1].receive(shown))
    bind = view_binding(c.bind, decode(shown))
    c_pk_1 = next(p.c_pk for p in msg.peers if p.party == 1)
    key = crypto.channel_key(crypto.agree(server_sk, c_pk_1), bind, 1, 3)
    plaintext = crypto.open_share(key, bind, 1, 3, dict(share_keys_1.ciphertexts)[3])
    assert plaintext[:8] == (1).to_bytes(4, "big") + (3).to_bytes(4, "big")


def _active_unmask_stage() -> tuple[Cohort, Transcript]:
    """n=7, t=5; party 7 shares keys but drops before its masked input, so U3 = {1..6}."""
    c = make_cohort(7, active=True)
    return c, run_to_unmasking(c, drop_before_input={7})


def test_server_rejects_invalid_consistency_signatures():
    c = make_cohort(7, active=True)
    adverts = {p: cl.start() for p, cl in c.clients.items()}
    routed = c.advance(c.reply(c.advance(adverts)))
    requests = c.advance(c.reply(routed))
    sig1 = decode(c.clients[1].receive(requests[1]))
    other_bitmap = c.bitmap({1, 2, 3, 4, 5, 6})
    for bad in (
        flip(sig1.signature, 0),
        c.sign_survivors(1, other_bitmap),  # party 1's signature on a different survivor set
        c.sign_survivors(2, decode(requests[1]).survivors),  # party 2's signature sent as party 1's
    ):
        with pytest.raises(SignatureError, match="party 1"):
            c.server.receive(1, ConsistencySignature(c.sid, 1, bad).encode())
    c.server.receive(1, sig1.encode())


@pytest.mark.parametrize("case", ["non_survivor", "repeated"])
def test_client_rejects_consistency_signatures_from_non_survivors_or_repeated_signers(case):
    c, tr = _active_unmask_stage()
    req = decode(tr.unmask_requests[1])
    genuine = dict(req.signatures)
    assert set(genuine) == {1, 2, 3, 4, 5, 6}
    four = [(p, genuine[p]) for p in (1, 2, 3, 4)]
    # Party 7 did take part in sharing keys and really signs the set, but it is not a survivor; or a
    # survivor's signature is counted twice. Either way t=5 entries hide only 4 surviving signers.
    extra = (7, c.sign_survivors(7, req.survivors)) if case == "non_survivor" else four[0]
    forged = dataclasses.replace(req, signatures=tuple(four + [extra]))
    with pytest.raises(InconsistentSurvivorsError, match="repeated or non-surviving"):
        c.clients[1].receive(forged.encode())
    expect_abandoned(c.clients[1])


def test_client_rejects_an_invalid_consistency_signature():
    c, tr = _active_unmask_stage()
    req = decode(tr.unmask_requests[1])
    sigs = tuple((p, flip(s, 9) if p == 4 else s) for p, s in req.signatures)
    with pytest.raises(InconsistentSurvivorsError, match="party 4"):
        c.clients[1].receive(dataclasses.replace(req, signatures=sigs).encode())
    expect_abandoned(c.clients[1])


def test_client_verifies_the_first_t_consistency_signatures_only():
    """t valid signatures of distinct surviving neighbours over the set the party signed are the proof (t > (m +
    corrupt)/2: two sets of t signers share an honest one); the party verifies the first t of the unmask request and
    reads no further. n = 7, t = 5, six survivors: a bad signature in sixth place is not read and the party unmasks; the
    same bad signature among the first t is refused. Whatever the order, the signers must all be distinct survivors."""
    c, tr = _active_unmask_stage()
    req = decode(tr.unmask_requests[1])
    assert [p for p, _ in req.signatures] == [1, 2, 3, 4, 5, 6] and c.t == 5
    late = dataclasses.replace(req, signatures=tuple((p, flip(s, 9) if p == 6 else s) for p, s in req.signatures))
    assert isinstance(decode(c.clients[1].receive(late.encode())), UnmaskShares)
    c, tr = _active_unmask_stage()
    req = decode(tr.unmask_requests[1])
    early = dataclasses.replace(req, signatures=(req.signatures[5], req.signatures[0], (2, flip(req.signatures[1][1], 9)),
                                                 *req.signatures[2:5]))
    with pytest.raises(InconsistentSurvivorsError, match="party 2"):
        c.clients[1].receive(early.encode())
    expect_abandoned(c.clients[1])


def test_client_rejects_fewer_than_threshold_consistency_signatures():
    c, tr = _active_unmask_stage()
    req = decode(tr.unmask_requests[1])
    short = dataclasses.replace(req, signatures=req.signatures[: c.t - 1])
    with pytest.raises(InconsistentSurvivorsError, match="below the threshold"):
        c.clients[1].receive(short.encode())
    # The genuine request is still refused: the client abandoned the session.
    with pytest.raises(WrongPhaseError):
        c.clients[1].receive(tr.unmask_requests[1])


def test_active_session_with_genuine_signatures_completes():
    """Control for the signature tests: the unaltered transcript is accepted and sums correctly."""
    c, tr = _active_unmask_stage()
    c.advance(c.reply(tr.unmask_requests))
    assert np.array_equal(c.server.result.vector, _plain_sum(c, range(1, 7)))


# ---------------------------------------------------------------------------------------------------
# 5. Share ciphertexts.
# ---------------------------------------------------------------------------------------------------


def _routed_to_1(verify: bool = True) -> tuple[Cohort, RoutedShares, dict[int, dict[int, bytes]]]:
    """n = 5 to the routed shares; party 1 checks its peers (`verify`) or not (verify_peers=False)."""
    c = make_cohort()
    c.clients[1] = ClientSession(c.cfg, 1, c.inputs[1], c.identities[1], c.public_ids, task_digest=c.digest,
                                 verify_peers=verify)
    peer_keys = c.advance({p: cl.start() for p, cl in c.clients.items()})
    share_keys = c.reply(peer_keys)
    sent = {u: dict(decode(m).ciphertexts) for u, m in share_keys.items()}
    return c, decode(c.advance(share_keys)[1]), sent


def _refuses_naming(c: Cohort, shown: RoutedShares, sender: int, verify: bool) -> None:
    """Party 1 refuses `shown` at the share from `sender`: verifying, as a task mismatch (the channel key is the
    sender's and bound to this session, task and members root, so a share that does not open under it is one the
    sender did not seal for them); not verifying, as a plain DecryptionError. No mask derived either way."""
    with mask_spy() as derived:
        if verify:
            with pytest.raises(TaskMismatchError, match=f"party {sender}'s share does not open") as err:
                c.clients[1].receive(shown.encode())
            assert err.value.party == sender
        else:
            with pytest.raises(DecryptionError, match=f"party {sender}") as plain:
                c.clients[1].receive(shown.encode())
            assert not isinstance(plain.value, TaskMismatchError)
    assert derived == []
    expect_abandoned(c.clients[1])


# Byte offsets in a share ciphertext: 0–7 sender/receiver ids, 8–40 self-mask share, 41–73 key share,
# 74–89 the GCM tag.
@pytest.mark.parametrize("verify", [True, False], ids=["verifying", "not-verifying"])
@pytest.mark.parametrize("index", [0, 5, 20, 60, 89])
def test_client_rejects_a_tampered_share_ciphertext(index, verify):
    c, routed, _ = _routed_to_1(verify)
    cts = tuple((u, flip(ct, index) if u == 3 else ct) for u, ct in routed.ciphertexts)
    _refuses_naming(c, dataclasses.replace(routed, ciphertexts=cts), 3, verify)


@pytest.mark.parametrize("verify", [True, False], ids=["verifying", "not-verifying"])
@pytest.mark.parametrize("attack", ["other-receiver", "relabelled-sender", "reflected"])
def test_client_rejects_a_rerouted_share_ciphertext(attack, verify):
    """Genuine ciphertexts in the wrong place: party 2's for party 4 given to party 1 as from 2 (another channel key),
    party 2's for party 1 labelled as from party 3 (another channel key and associated data), and party 1's own for
    party 2 reflected back as from 2 (the same channel key — it is symmetric — but another nonce and associated data:
    sender and receiver are bound)."""
    c, routed, sent = _routed_to_1(verify)
    if attack == "other-receiver":
        cts, named = tuple((u, sent[2][4] if u == 2 else ct) for u, ct in routed.ciphertexts), 2
    elif attack == "relabelled-sender":
        cts, named = tuple((u, sent[2][1] if u == 3 else ct) for u, ct in routed.ciphertexts), 3
    else:
        cts, named = tuple((u, sent[1][2] if u == 2 else ct) for u, ct in routed.ciphertexts), 2
    _refuses_naming(c, dataclasses.replace(routed, ciphertexts=cts), named, verify)


# ---------------------------------------------------------------------------------------------------
# 6. Replays, impersonation and conflicting messages.
# ---------------------------------------------------------------------------------------------------


def test_server_rejects_messages_from_another_session():
    c = make_cohort()
    other = make_cohort()
    with pytest.raises(WrongSessionError):
        c.server.receive(1, other.clients[1].start())  # replayed from a concurrent cohort
    relabelled = dataclasses.replace(decode(c.clients[1].start()), session_id=other.sid)
    with pytest.raises(WrongSessionError):
        c.server.receive(1, relabelled.encode())
    c.server.receive(1, c.clients[1].start())
    assert c.server.received() == {1}


def test_client_rejects_messages_from_another_session():
    c, peer_keys = _to_share_keys()
    replayed = dataclasses.replace(decode(peer_keys[1]), session_id=os.urandom(16))
    with pytest.raises(WrongSessionError):
        c.clients[1].receive(replayed.encode())
    assert c.clients[1].phase is Phase.ADVERTISE_KEYS  # not fatal: the genuine message still works
    assert isinstance(decode(c.clients[1].receive(peer_keys[1])), ShareKeys)


def test_server_rejects_earlier_phase_messages_in_later_phases():
    c = make_cohort()
    adverts = {p: cl.start() for p, cl in c.clients.items()}
    share_keys = c.reply(c.advance(adverts))
    with pytest.raises(WrongPhaseError, match="AdvertiseKeys"):
        c.server.receive(1, adverts[1])
    routed = c.advance(share_keys)
    masked = c.reply(routed)
    for stale in (adverts[2], share_keys[2]):
        with pytest.raises(WrongPhaseError):
            c.server.receive(2, stale)
    requests = c.advance(masked)
    with pytest.raises(WrongPhaseError, match="MaskedInput"):
        c.server.receive(3, masked[3])
    c.advance(c.reply(requests))
    assert np.array_equal(c.server.result.vector, _plain_sum(c, range(1, 6)))


def test_client_rejects_earlier_phase_messages_in_later_phases():
    c = make_cohort()
    peer_keys = c.advance({p: cl.start() for p, cl in c.clients.items()})
    routed = c.advance(c.reply(peer_keys))
    masked = c.reply(routed)
    # Replaying PeerKeys must not make the client share a fresh self-mask seed.
    with pytest.raises(WrongPhaseError, match="PeerKeys"):
        c.clients[1].receive(peer_keys[1])
    with pytest.raises(WrongPhaseError, match="RoutedShares"):
        c.clients[1].receive(_readdress(routed[2], 1))  # another RoutedShares after the masked input
    assert c.clients[1].phase is Phase.MASKED_INPUT
    requests = c.advance(masked)
    c.advance(c.reply(requests))
    assert np.array_equal(c.server.result.vector, _plain_sum(c, range(1, 6)))


def _readdress(data: bytes, party: int) -> bytes:
    return dataclasses.replace(decode(data), party=party).encode()


def test_server_rejects_a_message_submitted_under_another_party():
    c = make_cohort()
    a1 = c.clients[1].start()
    with pytest.raises(UnknownPartyError, match="names party 1"):
        c.server.receive(2, a1)
    for outsider in (0, 6, -1):
        with pytest.raises(UnknownPartyError):
            c.server.receive(outsider, a1)
    assert c.server.received() == frozenset()
    c.server.receive(1, a1)
    c.server.receive(2, c.clients[2].start())


def test_server_rejects_parties_that_dropped_earlier():
    c = make_cohort()
    adverts = {p: c.clients[p].start() for p in (1, 2, 3, 4)}  # party 5 never advertised
    share_keys = c.reply(c.advance(adverts))
    # Party 5 tries to join late with well-formed ciphertexts for everyone.
    late = ShareKeys(c.sid, 5, tuple((v, bytes(90)) for v in (1, 2, 3, 4)))
    with pytest.raises(UnknownPartyError, match="not expected"):
        c.server.receive(5, late.encode())
    routed = c.advance(share_keys)
    assert set(routed) == {1, 2, 3, 4} and all(5 not in dict(decode(m).ciphertexts) for m in routed.values())


def test_client_rejects_a_message_addressed_to_another_party():
    c, peer_keys = _to_share_keys()
    with pytest.raises(UnknownPartyError, match="addressed to party 2"):
        c.clients[1].receive(peer_keys[2])
    assert isinstance(decode(c.clients[1].receive(peer_keys[1])), ShareKeys)


def test_server_rejects_a_different_second_message_in_the_same_phase():
    c = make_cohort()
    first = c.clients[1].start()
    c.server.receive(1, first)
    second = ClientSession(c.cfg, 1, c.inputs[1]).start()  # same party, fresh keys
    with pytest.raises(ConflictError, match="party 1"):
        c.server.receive(1, second)
    peer_keys = c.advance({p: cl.start() for p, cl in c.clients.items() if p != 1} | {1: first})
    kept = {p.party: p.c_pk for p in decode(peer_keys[2]).peers}[1]
    assert kept == decode(first).c_pk


def test_server_accepts_an_identical_resend_once():
    c = make_cohort()
    adverts = {p: cl.start() for p, cl in c.clients.items()}
    c.server.receive(1, adverts[1])
    routed = c.advance(c.reply(c.advance(adverts)))
    masked = c.reply(routed)
    c.server.receive(1, masked[1])
    c.server.receive(1, masked[1])  # retried upload: accepted silently, counted once
    requests = c.advance(masked)
    c.advance(c.reply(requests))
    assert np.array_equal(c.server.result.vector, _plain_sum(c, range(1, 6)))


# ---------------------------------------------------------------------------------------------------
# 7. Server-side validation of what devices upload.
# ---------------------------------------------------------------------------------------------------


def test_server_rejects_masked_input_of_the_wrong_shape():
    c = make_cohort()
    routed = c.advance(c.reply(c.advance({p: cl.start() for p, cl in c.clients.items()})))
    masked = c.reply(routed)
    m1 = decode(masked[1])
    assert (m1.bits, m1.dim) == (16, 4)
    for bad in (
        dataclasses.replace(m1, bits=32, dim=2),  # same 8 bytes, read as two 32-bit entries
        dataclasses.replace(m1, bits=8, dim=8),
        dataclasses.replace(m1, dim=5),
        dataclasses.replace(m1, packed=m1.packed + b"\x00"),
        dataclasses.replace(m1, packed=m1.packed[:-1]),
    ):
        with pytest.raises(MessageFormatError, match="vector"):
            c.server.receive(1, bad.encode())
    requests = c.advance(masked)
    c.advance(c.reply(requests))
    assert np.array_equal(c.server.result.vector, _plain_sum(c, range(1, 6)))


def test_server_rejects_share_keys_to_the_wrong_receivers():
    c = make_cohort()
    adverts = {p: c.clients[p].start() for p in (1, 2, 3, 4)}  # party 5 dropped: U1 = {1..4}
    share_keys = c.reply(c.advance(adverts))
    msg = decode(share_keys[1])
    cts = msg.ciphertexts
    assert [v for v, _ in cts] == [2, 3, 4]
    for bad in (
        cts[:2],  # misses party 4
        cts + ((1, cts[0][1]),),  # to itself
        cts + ((5, cts[0][1]),),  # to a party that dropped
        cts + ((9, cts[0][1]),),  # to a party outside the cohort
        cts[:2] + ((3, cts[2][1]),),  # twice to party 3, none to party 4
    ):
        with pytest.raises(UnknownPartyError, match="exactly its 3 peers"):
            c.server.receive(1, dataclasses.replace(msg, ciphertexts=bad).encode())
    with pytest.raises(MessageFormatError, match="ciphertext for 2"):
        c.server.receive(1, dataclasses.replace(msg, ciphertexts=((2, cts[0][1][:-1]),) + cts[1:]).encode())
    c.server.receive(1, share_keys[1])


def test_server_rejects_unmask_shares_that_do_not_match_the_survivor_set():
    c = make_cohort()
    tr = run_to_unmasking(c, drop_before_input={5})  # U2 = {1..5}, U3 = {1..4}
    msg = decode(c.clients[1].receive(tr.unmask_requests[1]))
    shares = msg.shares
    assert {(v, k) for v, k, _ in shares} == {(1, 1), (2, 1), (3, 1), (4, 1), (5, 2)}
    kinds_swapped = tuple((v, ShareKind.SELF_MASK_SEED if v == 5 else k, s) for v, k, s in shares)
    for bad in (
        kinds_swapped,  # the self-mask share of a party that dropped: both secrets would be revealed
        tuple((v, ShareKind.MASK_KEY if v == 2 else k, s) for v, k, s in shares),  # key share of a survivor
        shares[:-1],  # missing party 5
        shares + ((6, 1, shares[0][2]),),  # unknown party
        shares[:1] + shares[:-1],  # party 1 twice, 5 missing
        shares + shares[-1:],  # party 5 twice
    ):
        with pytest.raises(UnknownPartyError, match="do not match the survivor set"):
            c.server.receive(1, dataclasses.replace(msg, shares=bad).encode())
    too_big = shamir.to_bytes(shamir.PRIME)
    with pytest.raises(MessageFormatError, match="out of the field"):
        c.server.receive(1, dataclasses.replace(msg, shares=((1, 1, too_big),) + shares[1:]).encode())
    c.server.receive(1, msg.encode())
    c.advance(c.reply({p: m for p, m in tr.unmask_requests.items() if p != 1}))
    assert np.array_equal(c.server.result.vector, _plain_sum(c, range(1, 5)))


# -- fixes for findings of this file's review -------------------------------------------------------


@pytest.mark.parametrize("low_order", [bytes(32), (1).to_bytes(32, "little")])
def test_server_refuses_low_order_keys_at_advertise_time_and_the_cohort_survives(low_order):

    cfg = SecAggConfig(session_id=os.urandom(16), n=5, dim=3, bits=16)
    server = ServerSession(cfg)
    clients = {p: ClientSession(cfg, p, np.full(3, p, dtype=np.uint64)) for p in range(1, 6)}
    bad = AdvertiseKeys(cfg.session_id, 5, low_order, os.urandom(32)).encode()
    with pytest.raises(DecryptionError, match="unusable"):
        server.receive(5, bad)
    outgoing = {p: c.start() for p, c in clients.items() if p != 5}
    while server.phase is not Phase.DONE:
        for p, m in outgoing.items():
            server.receive(p, m)
        delivered = server.close_phase()
        outgoing = {p: r for p, m in delivered.items() if (r := clients[p].receive(m)) is not None}
    assert server.result.vector.tolist() == [10, 10, 10]


def test_to_modular_refuses_unsigned_values_outside_the_signed_range():
    from secagg.encoding import to_modular

    with pytest.raises(ConfigError):
        to_modular(np.array([2**64 - 1], dtype=np.uint64), 62)


def test_bitmap_refuses_party_ids_outside_the_cohort():
    with pytest.raises(MessageFormatError):
        encode_bitmap({0, 1}, 4)
    with pytest.raises(MessageFormatError):
        encode_bitmap({5}, 4)
