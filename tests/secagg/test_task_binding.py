"""Task binding (device protocol 3): adversarial and property tests.

Every party binds its own task digest (queries/task_digest.py: what it was asked to compute) and, from its share keys
on, the members root of the members list it was shown (`crypto.round_binding`) into every derived key, the share AAD
and its signature over its advertised keys, signs those keys in ShareKeys (the server checks them), and at
RoutedShares, *before* it derives a single mask, opens each sender's share under a channel key agreed with that
sender's signed keys and bound to its own session, task and members root — a share that does not open is
TaskMismatchError naming the sender: the channel binding is what a sender's signature over the binding would have
proved — and verifies any member entries it asked for. Every party also signs its
fresh keys themselves (`crypto.keys_payload`, in AdvertiseKeys, relayed in each PeerEntry), and each peer's entry is
checked against its leaf in the members list and its key signature at PeerKeys, *before* a single share is encrypted
to it.
These tests play a server that shows members of one cohort different tasks (another digest, another cohort size
n), substitutes a peer's keys, withholds or forges member entries, and a device that signs for another task; each
checks the typed refusal (TaskMismatchError, CohortUnverifiedError, InconsistentSetsError, SignatureError) and,
where it matters, that no share was sealed, no mask was derived and no masked input left the device. Counterparts
show what happens with the checks off.

"A server that relays faithfully" is `RelayingServer`: the real ServerSession, except that it does not check the
ShareKeys signatures against its own digest (an honest server would refuse the odd one out, see
`test_server_refuses_share_keys_signed_for_another_task_and_the_rest_complete`); it routes every party's shares as
the protocol says (and each party's signature in the member entries it adds).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import random
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queries.task_digest import task_digest
from secagg import (
    AbortError,
    ClientSession,
    CohortUnverifiedError,
    ConfigError,
    DecryptionError,
    DuplicateKeyError,
    InconsistentSetsError,
    SecAggConfig,
    ServerSession,
    SignatureError,
    TaskMismatchError,
    WrongPhaseError,
    crypto,
    encoding,
    shamir,
)
from secagg.client import KeyPairs
from secagg.messages import MaskedInput, RoutedShares, ShareKeys, ShareKind, UnmaskRequest, decode, encode_bitmap
from secagg.phases import Phase
from secagg.randomness import SeededRandom
from secagg.simulate import expected_sum, run_session
from tests.secagg.members_lists import leaf_of, relisted, view_binding

DIM, BITS = 3, 16
TASK_A, TASK_B, TASK_C = (hashlib.sha256(b"test_task_binding/" + x).digest() for x in (b"A", b"B", b"C"))


class RelayingServer(ServerSession):
    """A server that relays faithfully but does not check ShareKeys signatures against its own task digest: each
    party's shares (sealed under whatever task it was shown) reach its peers."""

    def _accept_share_keys(self, party: int, msg: ShareKeys) -> None:
        signed, self._signed = self._signed, False
        try:
            super()._accept_share_keys(party, msg)
        finally:
            self._signed = signed
        self._key_sigs[party] = msg.signature


@contextmanager
def mask_spy() -> Iterator[list[int]]:
    """Records the party of every self-mask and pair-mask key derived (a client derives them only once it decided to
    compute its masked input; the server only when unmasking)."""
    derived: list[int] = []
    self_mask, pair_mask = crypto.self_mask_key, crypto.pair_mask_key

    def spy_self(seed: bytes, bind: bytes, u: int) -> bytes:
        derived.append(u)
        return self_mask(seed, bind, u)

    def spy_pair(shared: bytes, bind: bytes, u: int, v: int) -> bytes:
        derived.append(u)
        return pair_mask(shared, bind, u, v)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(crypto, "self_mask_key", spy_self)
        mp.setattr(crypto, "pair_mask_key", spy_pair)
        yield derived


@contextmanager
def seal_spy() -> Iterator[list[tuple[int, int]]]:
    """Records (sender, receiver) of every share ciphertext sealed (a client seals its shares only once it accepted
    the keys it was shown for its peers)."""
    sealed: list[tuple[int, int]] = []
    seal = crypto.seal_share

    def spy(key: bytes, bind: bytes, sender: int, receiver: int, plaintext: bytes) -> bytes:
        sealed.append((sender, receiver))
        return seal(key, bind, sender, receiver, plaintext)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(crypto, "seal_share", spy)
        yield sealed


@contextmanager
def without_members_check(leaves: bytes) -> Iterator[None]:
    """Clients without the members-list check: every entry is taken to match its leaf in `leaves` (the genuine list,
    which they then draw their graph and binding from), whatever keys it carries."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(crypto, "member_leaf", lambda party, identity, c_pk, s_pk: leaf_of(leaves, party))
        yield


@contextmanager
def without_peer_key_check() -> Iterator[None]:
    """The clients as they were before the PeerKeys check: any signature over a party's bare keys
    (`crypto.keys_payload`) is taken as valid — every other signature is still verified."""
    verify, prefix = crypto.verify, crypto.keys_payload(b"", b"")

    def lenient(public_raw: bytes, signature: bytes, payload: bytes, what: str) -> None:
        if not payload.startswith(prefix):
            verify(public_raw, signature, payload, what)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(crypto, "verify", lenient)
        yield


@dataclass
class Cohort:
    cfg: SecAggConfig
    inputs: dict[int, np.ndarray]
    identities: dict[int, Ed25519PrivateKey]
    clients: dict[int, ClientSession]
    server: ServerSession
    digests: dict[int, bytes]

    @property
    def public_ids(self) -> dict[int, bytes]:
        return {p: crypto.ed25519_public_bytes(k) for p, k in self.identities.items()}

    def advance(self, outgoing: Mapping[int, bytes]) -> dict[int, bytes]:
        for p, m in outgoing.items():
            self.server.receive(p, m)
        return self.server.close_phase()

    def reply(self, incoming: Mapping[int, bytes], skip=frozenset()) -> dict[int, bytes]:
        return {p: self.clients[p].receive(m) for p, m in incoming.items() if p not in skip}

    def to_routed(self) -> tuple[dict[int, bytes], dict[int, bytes], dict[int, bytes]]:
        """Advertise and share keys: (PeerKeys, ShareKeys, RoutedShares) by party."""
        peer_keys = self.advance({p: c.start() for p, c in self.clients.items()})
        share_keys = self.reply(peer_keys)
        return peer_keys, share_keys, self.advance(share_keys)

    def finish(self, incoming: Mapping[int, bytes]) -> np.ndarray:
        """Runs the session from the server messages `incoming` to its result."""
        while self.server.phase is not Phase.DONE:
            replies = {p: self.clients[p].receive(m) for p, m in incoming.items()}
            incoming = self.advance({p: r for p, r in replies.items() if r is not None})
        assert self.server.result is not None
        return self.server.result.vector


def party_randomness(cfg: SecAggConfig, party: int) -> SeededRandom:
    return SeededRandom(cfg.session_id + party.to_bytes(4, "big"))


def make_cohort(
    n: int, digests: bytes | Mapping[int, bytes], *, active: bool = False, server_digest: bytes | None = None,
    relaying: bool = True, verify: bool = True, graph: str = "auto", sid: bytes | None = None,
    configs: Mapping[int, SecAggConfig] | None = None, min_verified: Mapping[int, int] | None = None,
    identities: Mapping[int, Ed25519PrivateKey] | None = None, degree: int | None = None,
) -> Cohort:
    """n parties; party p's task digest is `digests[p]` (or `digests` for all), its config `configs[p]` (default: the
    cohort's). The server binds `server_digest` (default: party 1's) and relays without checking (`relaying`) or
    checks every ShareKeys signature (an honest server)."""
    cfg = SecAggConfig(sid or os.urandom(16), n, DIM, BITS, graph=graph,  # type: ignore[arg-type]
                       threat_model="active" if active else "semi_honest", degree=degree)
    per = {p: digests for p in range(1, n + 1)} if isinstance(digests, bytes) else dict(digests)
    rng = np.random.default_rng(n)
    inputs = {p: rng.integers(0, 1 << BITS, DIM, dtype=np.uint64) for p in range(1, n + 1)}
    ids = dict(identities) if identities else {p: Ed25519PrivateKey.generate() for p in inputs}
    public = {p: crypto.ed25519_public_bytes(k) for p, k in ids.items()}
    clients = {
        p: ClientSession((configs or {}).get(p, cfg), p, v, ids[p], public, task_digest=per[p], verify_peers=verify,
                         min_verified=(min_verified or {}).get(p), randomness=party_randomness(cfg, p))
        for p, v in inputs.items()
    }
    server_cls = RelayingServer if relaying else ServerSession
    server = server_cls(cfg, public, task_digest=server_digest or per[1])
    return Cohort(cfg, inputs, ids, clients, server, per)


def assert_refuses(client: ClientSession, message: bytes, error: type[Exception], **attrs) -> Exception:
    """The client refuses `message` with `error` (attributes as given), abandons the session and never answers."""
    with pytest.raises(error) as info:
        client.receive(message)
    for name, value in attrs.items():
        assert getattr(info.value, name) == value, (name, getattr(info.value, name), value)
    assert client.phase is Phase.ABORTED
    with pytest.raises(WrongPhaseError):
        client.receive(message)  # not even a retry of the same bytes yields a masked input
    return info.value


# ---------------------------------------------------------------------------------------------------
# 0. The binding itself.
# ---------------------------------------------------------------------------------------------------


def test_every_derived_key_aad_and_signed_payload_depends_on_the_task_digest():
    """Each primitive that takes the binding gives a different result for another task digest (and for another
    session), so two parties shown different tasks share no key, no AAD and no signature."""
    sid, other_sid = bytes(range(16)), bytes(range(1, 17))
    shared, seed, c_pk, s_pk = bytes(range(32)), bytes(range(32, 64)), bytes([7]) * 32, bytes([9]) * 32
    bitmap = encode_bitmap({1, 2, 3}, 3)
    derivations = {
        "channel": lambda b: crypto.channel_key(shared, b, 1, 2),
        "pairmask": lambda b: crypto.pair_mask_key(shared, b, 1, 2),
        "selfmask": lambda b: crypto.self_mask_key(seed, b, 1),
        "share_aad": lambda b: crypto.share_aad(b, 1, 2),
        "sealed": lambda b: crypto.seal_share(bytes(32), b, 1, 2, b"share"),
        "advertise": lambda b: crypto.advertise_payload(b, 1, c_pk, s_pk),
        "consistency": lambda b: crypto.consistency_payload(b, bitmap),
    }
    binds = [crypto.binding(sid, TASK_A), crypto.binding(sid, TASK_B), crypto.binding(sid, crypto.NO_TASK),
             crypto.binding(other_sid, TASK_A)]
    assert crypto.binding(sid, TASK_A) == sid + TASK_A
    for name, derive in derivations.items():
        assert len({derive(b) for b in binds}) == len(binds), name
    key = Ed25519PrivateKey.generate()
    public = crypto.ed25519_public_bytes(key)
    sig = crypto.sign(key, crypto.advertise_payload(binds[0], 1, c_pk, s_pk))
    crypto.verify(public, sig, crypto.advertise_payload(binds[0], 1, c_pk, s_pk), "keys")
    for b in binds[1:]:
        with pytest.raises(SignatureError):
            crypto.verify(public, sig, crypto.advertise_payload(b, 1, c_pk, s_pk), "keys")
    with pytest.raises(DecryptionError):
        crypto.open_share(bytes(32), binds[1], 1, 2, crypto.seal_share(bytes(32), binds[0], 1, 2, b"share"))


# ---------------------------------------------------------------------------------------------------
# 1. Two honest parties of one session shown different tasks.
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("active", [False, True], ids=["semi-honest", "active"])
def test_parties_shown_different_tasks_refuse_before_any_mask(active):
    """Party 3 was shown task B, everyone else task A, and the server relays faithfully: party 3 refuses at
    RoutedShares because its senders' shares were sealed under channel keys bound to task A, each other party because
    party 3's was sealed under task B — TaskMismatchError naming the share's sender. Nobody derives a mask, so no
    masked input exists."""
    c = make_cohort(5, {1: TASK_A, 2: TASK_A, 3: TASK_B, 4: TASK_A, 5: TASK_A}, active=active)
    with mask_spy() as derived:
        _, share_keys, routed = c.to_routed()
        assert set(routed) == {1, 2, 3, 4, 5}  # the relaying server accepted everyone's keys and signatures
        victim = assert_refuses(c.clients[3], routed[3], TaskMismatchError)
        assert victim.party in {1, 2, 4, 5} and "share does not open" in str(victim)
        for p in (1, 2, 4, 5):
            assert_refuses(c.clients[p], routed[p], TaskMismatchError, party=3)
    assert derived == []
    with pytest.raises(AbortError):
        c.advance({})  # no masked input reached the server: the cohort aborts, nothing is released


def test_a_victim_shown_another_task_refuses_even_when_its_peers_are_not_checked():
    """The victim's own check suffices: fed RoutedShares whose shares are all genuine for task A, a party with task B
    refuses (TaskMismatchError naming the first sender) before deriving any mask."""
    c = make_cohort(5, {**{p: TASK_A for p in range(1, 6)}, 2: TASK_B})
    _, _, routed = c.to_routed()
    with mask_spy() as derived:
        assert_refuses(c.clients[2], routed[2], TaskMismatchError, party=1)
    assert derived == []


def _sealed_by_3_for_1(c: Cohort, share_keys: Mapping[int, bytes], bind: bytes) -> bytes:
    """The share party 3 would have sent party 1 had it been bound to `bind` (another task, another members list):
    party 3's genuine plaintext for party 1, sealed under the channel key of its own channel key pair and party 1's,
    derived and authenticated with `bind` — what an honest party 3 shown that binding sends."""
    sender, receiver = c.clients[3], c.clients[1]
    genuine = dict(decode(share_keys[3]).ciphertexts)[1]
    plaintext = crypto.open_share(sender._channel[1], sender._bind, 3, 1, genuine)
    key = crypto.channel_key(crypto.agree(sender._c_sk, receiver._c_pk), bind, 3, 1)
    return crypto.seal_share(key, bind, 3, 1, plaintext)


@contextmanager
def without_channel_binding() -> Iterator[None]:
    """Channel keys and share AAD bound to the session alone (the task digest and the members root left out): what
    the clients would be without the channel binding."""
    channel_key, share_aad = crypto.channel_key, crypto.share_aad
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(crypto, "channel_key", lambda shared, bind, u, v: channel_key(shared, bind[:16], u, v))
        mp.setattr(crypto, "share_aad", lambda bind, s, r: share_aad(bind[:16], s, r))
        yield


@pytest.mark.parametrize("active", [False, True], ids=["semi-honest", "active"])
@pytest.mark.parametrize("shown", ["other-task", "other-members-root", "no-members-root"])
def test_a_share_sealed_for_another_task_or_members_list_is_refused_by_the_channel_binding(shown, active):
    """The attack the senders' signatures used to catch, caught now by the channel binding alone: the server shows
    party 3 another task (or another members list) and routes the share party 3 then seals — under its genuine channel
    key with party 1, both parties' keys signed — to party 1, whose own task and list are the cohort's. Party 1 cannot
    open it: the channel key and the associated data are bound to session ‖ task digest ‖ members root, so it refuses
    (TaskMismatchError naming party 3, "share does not open …") before deriving any mask; nothing of its input leaves.
    Counterpart — the guard that this test fails if the channel binding were removed: with channel keys and AAD bound
    to the session alone, the same share opens and party 1 masks and sends its input although party 3 was shown
    another task (nothing else on the device checks the sender)."""
    for bound in (True, False):
        with contextlib.ExitStack() as stack:
            if not bound:
                stack.enter_context(without_channel_binding())
            c = make_cohort(7 if active else 5, TASK_A, active=active, relaying=False)
            _, share_keys, routed = c.to_routed()
            assert c.clients[1]._bind == crypto.round_binding(crypto.binding(c.cfg.session_id, TASK_A),
                                                              c.server.members_root)
            other = {"other-task": crypto.round_binding(crypto.binding(c.cfg.session_id, TASK_B), c.server.members_root),
                     "other-members-root": crypto.round_binding(crypto.binding(c.cfg.session_id, TASK_A),
                                                                hashlib.sha256(b"another list").digest()),
                     "no-members-root": crypto.binding(c.cfg.session_id, TASK_A)}[shown]
            r1 = decode(routed[1])
            forged = _sealed_by_3_for_1(c, share_keys, other)
            shown_1 = dataclasses.replace(r1, ciphertexts=tuple((u, forged if u == 3 else ct)
                                                                for u, ct in r1.ciphertexts)).encode()
            with mask_spy() as derived:
                if bound:
                    err = assert_refuses(c.clients[1], shown_1, TaskMismatchError, party=3)
                    assert "party 3's share does not open under the channel key bound to this session, task and " \
                           "members list" in str(err)
                else:
                    assert isinstance(decode(c.clients[1].receive(shown_1)), MaskedInput)
            assert (1 in derived) is not bound


def test_without_verification_a_split_task_never_yields_the_true_sum():
    """Counterpart, every client with verify_peers=False. The digest is still in every key: the share channel keys
    and AAD differ, so the victim and every peer fail to open each other's shares (DecryptionError) before masking.
    And with that binding removed too (channel keys and AAD without the digest, monkeypatched), the parties mask
    with keys derived from different digests: the masks do not cancel and the server's "sum" is not the sum of
    anything — while the same patched session with one task sums exactly (control)."""
    digests = {1: TASK_A, 2: TASK_A, 3: TASK_B, 4: TASK_A, 5: TASK_A}
    c = make_cohort(5, digests, verify=False)
    _, _, routed = c.to_routed()
    with mask_spy() as derived:
        assert_refuses(c.clients[3], routed[3], DecryptionError)
        for p in (1, 2, 4, 5):
            err = assert_refuses(c.clients[p], routed[p], DecryptionError)
            assert "party 3" in str(err)
    assert derived == []

    channel_key, share_aad = crypto.channel_key, crypto.share_aad

    def unbound(bind: bytes) -> bytes:
        return bind[:16] + crypto.NO_TASK

    for split in (True, False):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(crypto, "channel_key", lambda shared, bind, u, v: channel_key(shared, unbound(bind), u, v))
            mp.setattr(crypto, "share_aad", lambda bind, s, r: share_aad(unbound(bind), s, r))
            c = make_cohort(5, digests if split else TASK_A, verify=False)
            _, _, routed = c.to_routed()
            total = c.finish(routed)
        assert c.server.result.contributors == frozenset(range(1, 6))
        exact = expected_sum(c.inputs, range(1, 6), BITS)
        if split:
            assert not np.array_equal(total, exact)
            others = expected_sum(c.inputs, [1, 2, 4, 5], BITS)
            assert not np.array_equal(total, others)
        else:
            assert np.array_equal(total, exact)


# ---------------------------------------------------------------------------------------------------
# 2. A server that substitutes a peer's public keys (refused at PeerKeys, by the peer's key signature).
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("active", [False, True], ids=["semi-honest", "active"])
@pytest.mark.parametrize("which", ["c_pk", "s_pk", "both"])
def test_substituted_peer_keys_are_refused_at_peer_keys_before_any_share(active, which):
    """An honest-looking server (it checks every signature) shows party 1 its own key for party 4, relaying party 4's
    genuine key signature with it, and a members list whose leaf for party 4 matches what it shows. Party 1 checks
    every peer's key signature at PeerKeys: party 4's does not verify over the keys party 1 was shown, so it refuses
    (TaskMismatchError naming party 4) before it encrypts a single share — to party 4 or anyone — and never derives a
    mask. The others, shown the genuine keys, go on without it. (The entry altered without its leaf: refused at the
    leaf, test_adversarial.py.)"""
    c = make_cohort(5, TASK_A, active=active, relaying=False)
    peer_keys = c.advance({p: cl.start() for p, cl in c.clients.items()})
    shown = decode(peer_keys[1])
    _, fake_c = crypto.x25519_keypair()
    _, fake_s = crypto.x25519_keypair()
    peers = tuple(
        dataclasses.replace(e, c_pk=fake_c if which != "s_pk" else e.c_pk, s_pk=fake_s if which != "c_pk" else e.s_pk)
        if e.party == 4 else e for e in shown.peers
    )
    assert next(e for e in peers if e.party == 4).signature  # party 4's genuine key signature, relayed unchanged
    with seal_spy() as sealed, mask_spy() as derived:
        err = assert_refuses(c.clients[1], relisted(shown, peers).encode(), TaskMismatchError, party=4)
        assert "not signed by its identity key" in str(err)
        share_keys = c.reply(peer_keys, skip={1})
        routed = c.advance(share_keys)
        assert set(routed) == {2, 3, 4, 5} and all(1 not in dict(decode(m).ciphertexts) for m in routed.values())
        for p in (2, 3, 4, 5):  # the others go on, with party 1 dropped
            assert c.clients[p].receive(routed[p]) is not None
    assert not any(sender == 1 for sender, _ in sealed) and {s for s, _ in sealed} == {2, 3, 4, 5}
    assert 1 not in derived and {2, 3, 4, 5} <= set(derived)


@pytest.mark.parametrize("signature", ["empty", "flipped", "another-identity", "bound-advertise"])
def test_a_peer_entry_whose_key_signature_does_not_verify_is_refused_at_peer_keys(signature):
    """The keys are genuine but the signature relayed with them is not party 4's over exactly those keys: missing,
    altered, made by another party's identity key, or party 4's *session-bound* signature (another payload) —
    TaskMismatchError naming party 4, and no share sealed."""
    c = make_cohort(5, TASK_A, relaying=False)
    peer_keys = c.advance({p: cl.start() for p, cl in c.clients.items()})
    shown = decode(peer_keys[1])
    e4 = next(e for e in shown.peers if e.party == 4)
    crypto.verify(c.public_ids[4], e4.signature, crypto.keys_payload(e4.c_pk, e4.s_pk), "party 4's keys")
    bad = {
        "empty": b"",
        "flipped": bytes([e4.signature[0] ^ 1]) + e4.signature[1:],
        "another-identity": crypto.sign(c.identities[2], crypto.keys_payload(e4.c_pk, e4.s_pk)),
        "bound-advertise": crypto.sign(c.identities[4], crypto.advertise_payload(
            crypto.binding(c.cfg.session_id, TASK_A), 4, e4.c_pk, e4.s_pk)),
    }[signature]
    peers = tuple(dataclasses.replace(e, signature=bad) if e.party == 4 else e for e in shown.peers)
    with seal_spy() as sealed:
        assert_refuses(c.clients[1], dataclasses.replace(shown, peers=peers).encode(), TaskMismatchError, party=4)
    assert sealed == []


def test_substituted_keys_of_a_member_entry_are_refused():
    """The same for a member entry (sparse graph): keys other than those in the member's leaf of the members list →
    InconsistentSetsError naming it; and with the leaf check off, keys other than those the member signed →
    TaskMismatchError."""
    s = _sparse_session(min_verified={1: 60})
    members = s.routed1.members
    _, fake = crypto.x25519_keypair()
    for field in ("c_pk", "s_pk"):
        forged = members[:3] + (dataclasses.replace(members[3], **{field: fake}),) + members[4:]
        err = assert_refuses(s.fresh_party1(), dataclasses.replace(s.routed1, members=forged).encode(),
                             InconsistentSetsError)
        assert f"party {members[3].party}'s entry is not the one in the members list" in str(err)
        party1 = s.fresh_party1()
        with without_members_check(decode(s.peer_keys[1]).leaves):
            assert_refuses(party1, dataclasses.replace(s.routed1, members=forged).encode(), TaskMismatchError,
                           party=members[3].party)


# ---------------------------------------------------------------------------------------------------
# 3. Another cohort size n for one party.
# ---------------------------------------------------------------------------------------------------


def _digest_of(cfg: SecAggConfig) -> bytes:
    """The digest a device computes from an assignment carrying `cfg` (its secagg block)."""
    return task_digest({"query_id": "q-binding", "round": 0, "kind": "histogram", "secagg": cfg.to_dict(),
                        "threat_model": cfg.threat_model, "mode": "secagg"})


def _padded_for(peer_keys: dict[int, bytes], party: int, n: int) -> None:
    """The server's move for a party told the cohort has `n` members: its members list padded with absent leaves to
    n (party `n` "did not advertise"), so that the list has the length the party expects."""
    shown = decode(peer_keys[party])
    peer_keys[party] = dataclasses.replace(
        shown, leaves=shown.leaves + crypto.ABSENT_LEAF * (n - len(shown.leaves) // crypto.MEMBER_LEAF_BYTES)).encode()


@pytest.mark.parametrize("relaying", [True, False], ids=["relaying-server", "checking-server"])
def test_a_party_shown_another_cohort_size_is_detected(relaying):
    """Party 2 is told n = 7 (same session id), the others n = 6. Shown the cohort's members list it refuses at PeerKeys
    (6 leaves for a cohort of 7) before sealing a share. Shown a list padded to 7 (an absent seventh member), its
    members root — and its digest — differ from everyone else's: with a relaying server it refuses at RoutedShares and
    its peers refuse its share; an honest server refuses its ShareKeys. Without the digest (both configs bound to
    no task) the padded list alone still splits it from the others: the members root is in the binding too."""
    sid = os.urandom(16)
    cfg6, cfg7 = SecAggConfig(sid, 6, DIM, BITS), SecAggConfig(sid, 7, DIM, BITS)
    d6, d7 = _digest_of(cfg6), _digest_of(cfg7)
    assert d6 != d7
    c = make_cohort(6, {**{p: d6 for p in range(1, 7)}, 2: d7}, sid=sid, configs={2: cfg7}, relaying=relaying,
                    server_digest=d6)
    peer_keys = c.advance({p: cl.start() for p, cl in c.clients.items()})
    probe = ClientSession(cfg7, 2, c.inputs[2], c.identities[2], task_digest=d7, randomness=party_randomness(c.cfg, 2))
    probe.start()
    with seal_spy() as sealed:
        assert_refuses(probe, peer_keys[2], InconsistentSetsError)  # 6 leaves for a cohort of 7
    assert sealed == []
    _padded_for(peer_keys, 2, 7)
    share_keys = c.reply(peer_keys)
    if relaying:
        routed = c.advance(share_keys)
        with mask_spy() as derived:
            assert_refuses(c.clients[2], routed[2], TaskMismatchError)
            for p in (1, 3, 4, 5, 6):
                assert_refuses(c.clients[p], routed[p], TaskMismatchError, party=2)
        assert derived == []
    else:
        with pytest.raises(SignatureError, match="party 2"):
            c.server.receive(2, share_keys[2])
    # the same split bound to no task: the padded list's root still sets party 2 apart
    c = make_cohort(6, crypto.NO_TASK, sid=sid, configs={2: cfg7})
    peer_keys = c.advance({p: cl.start() for p, cl in c.clients.items()})
    _padded_for(peer_keys, 2, 7)
    routed = c.advance(c.reply(peer_keys))
    with mask_spy() as derived:
        assert_refuses(c.clients[2], routed[2], TaskMismatchError)
        for p in (1, 3, 4, 5, 6):
            assert_refuses(c.clients[p], routed[p], TaskMismatchError, party=2)
    assert derived == []


# ---------------------------------------------------------------------------------------------------
# 4. The server's own check: a ShareKeys signed for another task is refused, the others go on.
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("active", [False, True], ids=["semi-honest", "active"])
def test_server_refuses_share_keys_signed_for_another_task_and_the_rest_complete(active):
    """Party 4's device computed task B; the server's cohort is task A. Its ShareKeys signature (over its genuine
    keys, bound to task B) is refused with SignatureError; the message is not recorded, party 4 is dropped at share
    keys, and the other parties' round completes with the exact sum of their inputs."""
    n = 7 if active else 5
    c = make_cohort(n, {**{p: TASK_A for p in range(1, n + 1)}, 4: TASK_B}, active=active, relaying=False)
    peer_keys = c.advance({p: cl.start() for p, cl in c.clients.items()})
    share_keys = c.reply(peer_keys)
    with pytest.raises(SignatureError, match="party 4"):
        c.server.receive(4, share_keys[4])
    assert not c.server.has_answered(4)
    # the same keys signed for task A would be accepted: it is the task, not the keys, that is refused
    adverts4 = decode(c.clients[4].start())
    probe = ServerSession(c.cfg, c.public_ids, task_digest=TASK_A)
    for p in range(1, n + 1):
        probe.receive(p, c.clients[p].start())
    probe.close_phase()
    assert probe.members_root == c.server.members_root
    bind_a = crypto.round_binding(crypto.binding(c.cfg.session_id, TASK_A), c.server.members_root)
    good = crypto.sign(c.identities[4], crypto.advertise_payload(bind_a, 4, adverts4.c_pk, adverts4.s_pk))
    probe.receive(4, dataclasses.replace(decode(share_keys[4]), signature=good).encode())
    routed = c.advance({p: m for p, m in share_keys.items() if p != 4})
    assert set(routed) == set(range(1, n + 1)) - {4}
    assert c.server.dropped[Phase.SHARE_KEYS] == frozenset({4})
    assert all(4 not in dict(decode(m).ciphertexts) for m in routed.values())
    total = c.finish(routed)
    others = [p for p in range(1, n + 1) if p != 4]
    assert c.server.result.contributors == frozenset(others)
    assert np.array_equal(total, expected_sum(c.inputs, others, BITS))


# ---------------------------------------------------------------------------------------------------
# 5. min_verified: counting the cohort, not the server's word.
# ---------------------------------------------------------------------------------------------------


SPARSE_N = 150
SPARSE_SID = hashlib.sha256(b"test_task_binding/sparse").digest()[:16]


@dataclass
class SparseSession:
    cohort: Cohort
    peer_keys: dict[int, bytes]
    share_keys: dict[int, bytes]
    routed: dict[int, bytes]
    min_verified: Mapping[int, int]
    refused: frozenset[int] = frozenset()
    """Parties that refused their PeerKeys (DuplicateKeyError: two seats of one device in their neighbourhood)."""

    @property
    def routed1(self) -> RoutedShares:
        return decode(self.routed[1])

    def fresh_party1(self) -> ClientSession:
        """A party-1 client in the state the real one had when RoutedShares arrived (same seed: same keys, shares
        and ShareKeys), so each tampered RoutedShares meets an unspent client."""
        c = self.cohort
        fresh = ClientSession(c.cfg, 1, c.inputs[1], c.identities[1], c.public_ids, task_digest=c.digests[1],
                              min_verified=self.min_verified.get(1), randomness=party_randomness(c.cfg, 1))
        fresh.start()
        assert fresh.receive(self.peer_keys[1]) == self.share_keys[1]
        return fresh


_SPARSE_CACHE: dict[tuple, SparseSession] = {}


def _sparse_session(min_verified: Mapping[int, int], absent: frozenset[int] = frozenset(),
                    shared_identities: Mapping[int, int] | None = None) -> SparseSession:
    """A semi-honest cohort of 150 on the sparse graph (neighbourhood 45, t = 23), honest server, run to RoutedShares;
    party p asks for `min_verified[p]`. `absent` parties never advertise; `shared_identities[w] = u`: party w holds
    party u's identity key (one device, two seats; a party shown both in its PeerKeys refuses, `refused`). Cached per
    arguments and worker: tests either only read it, or spend the clients of parties they alone use (or
    `fresh_party1`)."""
    key = (tuple(sorted(min_verified.items())), absent, tuple(sorted((shared_identities or {}).items())))
    if key in _SPARSE_CACHE:
        return _SPARSE_CACHE[key]
    sid = SPARSE_SID  # one session (and seeded keys): variants with the same members draw the same graph
    ids = _sparse_identities()
    for w, u in (shared_identities or {}).items():
        ids[w] = ids[u]
    c = make_cohort(SPARSE_N, TASK_A, graph="sparse", sid=sid, relaying=False, min_verified=min_verified,
                    identities=ids, degree=44)
    assert not c.cfg.uses_complete_graph and c.cfg.neighbourhood_size == 45 and c.cfg.share_threshold == 23
    peer_keys = c.advance({p: cl.start() for p, cl in c.clients.items() if p not in absent})
    share_keys, refused = {}, set()
    for p, m in peer_keys.items():
        try:
            share_keys[p] = c.clients[p].receive(m)
        except DuplicateKeyError:
            refused.add(p)
    s = SparseSession(c, peer_keys, share_keys, c.advance(share_keys), dict(min_verified), frozenset(refused))
    _SPARSE_CACHE[key] = s
    return s


def _sparse_identities() -> dict[int, Ed25519PrivateKey]:
    return {p: Ed25519PrivateKey.from_private_bytes(SeededRandom(SPARSE_SID + b"identity" + p.to_bytes(4, "big"))
                                                    .bytes(32)) for p in range(1, SPARSE_N + 1)}


def _two_seats_around_party1() -> dict[int, int]:
    """Shared identities {w: u, w2: w1} for the sparse session such that, in the graph they lead to (the identities are
    in the members list, so they draw the graph): u is party 1's neighbour, w, w1 and w2 are among the member entries
    the server gives party 1 (the first 37 non-neighbours that shared keys), and u is not shown to anyone together
    with w, nor w1 with w2 (a party shown two seats of one device in its PeerKeys refuses; those are the only
    refusals). A deterministic search over candidate pairs: each try draws a fresh graph (about one in 30 fits)."""
    sid, cfg = SPARSE_SID, SecAggConfig(SPARSE_SID, SPARSE_N, DIM, BITS, graph="sparse", degree=44)
    public = {p: crypto.ed25519_public_bytes(k) for p, k in _sparse_identities().items()}
    keys = {p: KeyPairs.draw(party_randomness(cfg, p)) for p in public}
    bind = crypto.binding(sid, TASK_A)
    pick = random.Random(46)
    for _ in range(2000):
        u = pick.randrange(2, SPARSE_N + 1)
        w, w1, w2 = pick.sample([x for x in range(2, 31) if x != u], 3)
        shared = {w: u, w2: w1}
        ids = {p: public[shared.get(p, p)] for p in public}
        leaves = b"".join(crypto.member_leaf(p, ids[p], keys[p].c_pk, keys[p].s_pk) for p in sorted(public))
        graph = cfg.neighbour_graph(crypto.graph_seed(bind, crypto.members_root(leaves)))
        near = graph.closed_set(1)
        refused = {v for v in public if {u, w} <= graph.closed_set(v) or {w1, w2} <= graph.closed_set(v)}
        members = [x for x in sorted(set(public) - refused) if x not in near][:37]
        if u in near and u not in refused and {w, w1, w2} <= set(members) and 1 not in refused:
            return shared
    raise AssertionError("no fitting pair of shared identities found")  # pragma: no cover


def test_min_verified_on_a_sparse_graph_asks_for_member_entries_and_passes():
    """Party 1 wants 60 verified members, more than its neighbourhood (45): it asks for 60 − t = 37 member entries,
    the server adds 37 signed entries of non-neighbours, party 1 verifies them and counts 45 + 37 = 82 distinct
    identities. A party without min_verified asks for none; the session then completes with the exact sum."""
    s = _sparse_session(min_verified={1: 60})
    c = s.cohort
    assert decode(s.share_keys[1]).members_wanted == 60 - 23
    assert all(decode(s.share_keys[p]).members_wanted == 0 for p in range(2, SPARSE_N + 1))
    members = s.routed1.members
    near = c.server.graph.closed_set(1)
    assert len(members) == 37 and len({m.party for m in members}) == 37 and not {m.party for m in members} & near
    assert all(decode(s.routed[p]).members == () for p in range(2, SPARSE_N + 1))
    party1 = s.fresh_party1()
    assert party1.receive(s.routed[1]) is not None
    assert party1.verified_members == 45 + 37
    c.clients[1] = party1
    total = c.finish(s.routed)
    assert np.array_equal(total, expected_sum(c.inputs, range(1, SPARSE_N + 1), BITS))


@pytest.mark.parametrize(("kept", "passes"), [(0, False), (10, False), (14, False), (15, True), (37, True)])
def test_min_verified_fails_when_the_server_withholds_member_entries(kept, passes):
    """Party 1 counts 45 identities from its neighbourhood and needs 60: a server that sends fewer than 15 of the 37
    member entries it was asked for is refused with CohortUnverifiedError (exact counts), before any mask."""
    s = _sparse_session(min_verified={1: 60})
    withheld = dataclasses.replace(s.routed1, members=s.routed1.members[:kept]).encode()
    party1 = s.fresh_party1()
    with mask_spy() as derived:
        if passes:
            assert party1.receive(withheld) is not None
            assert party1.verified_members == 45 + kept
        else:
            assert_refuses(party1, withheld, CohortUnverifiedError, verified=45 + kept, minimum=60)
            assert derived == []


def test_min_verified_fails_when_the_cohort_is_smaller():
    """30 parties never advertise (120 remain). Party 1 (min_verified 121) gets an entry for every member outside its
    neighbourhood that shared keys and counts 120: CohortUnverifiedError. Party 2 (min_verified 120) passes with
    exactly 120; party 3 (min_verified 151, above n) can never pass. Absent parties never appear as members."""
    absent = frozenset(range(SPARSE_N - 29, SPARSE_N + 1))
    s = _sparse_session(min_verified={1: 121, 2: 120, 3: 151}, absent=absent)
    c = s.cohort
    u2 = c.server.survivors(Phase.SHARE_KEYS)
    assert len(u2) == 120 and not u2 & absent
    for p, minimum in ((1, 121), (3, 151)):
        members = decode(s.routed[p]).members
        assert {m.party for m in members} == u2 - c.server.graph.closed_set(p)
        with mask_spy() as derived:
            assert_refuses(c.clients[p], s.routed[p], CohortUnverifiedError, verified=len(u2), minimum=minimum)
        assert derived == []
    assert c.clients[2].receive(s.routed[2]) is not None
    assert c.clients[2].verified_members == 120


def test_min_verified_counts_duplicate_identity_keys_once():
    """One device holding several seats signs with one identity key: counted once — and since protocol 3 (identities
    in PeerKeys) never twice in one neighbourhood: complete graph of 8 where parties 5–8 hold party 4's identity, every
    party refuses its PeerKeys (DuplicateKeyError) before sealing a share. Sparse graph: a member entry whose identity is
    a neighbour's, or another member's, adds nothing to the count."""
    base = {p: Ed25519PrivateKey.generate() for p in range(1, 9)}
    ids = {**base, **{p: base[4] for p in (5, 6, 7, 8)}}
    c = make_cohort(8, TASK_A, relaying=False, min_verified={1: 5, 2: 4}, identities=ids)
    peer_keys = c.advance({p: cl.start() for p, cl in c.clients.items()})
    with seal_spy() as sealed:
        for p in range(1, 9):
            assert_refuses(c.clients[p], peer_keys[p], DuplicateKeyError)
    assert sealed == []

    shared = _two_seats_around_party1()
    s = _sparse_session(min_verified={1: 60}, shared_identities=shared)
    c = s.cohort
    assert 1 not in s.refused and s.refused  # some parties saw both seats of a device, party 1 did not
    party1 = s.fresh_party1()
    assert party1.receive(s.routed[1]) is not None
    senders = {v for v, _ in s.routed1.ciphertexts}
    members = {m.party for m in s.routed1.members}
    assert set(shared) <= members and set(shared.values()) <= senders | members
    counted = {1} | senders | members
    assert party1.verified_members == len({c.public_ids[p] for p in counted}) == len(counted) - 2


@pytest.mark.parametrize("case", ["neighbour", "itself", "repeated", "zero", "beyond-n", "max-u32"])
def test_member_entries_that_are_neighbours_repeated_or_outside_the_cohort_are_refused(case):
    s = _sparse_session(min_verified={1: 60})
    members = s.routed1.members
    neighbour = next(p for p in s.cohort.server.graph.closed(1) if p != 1)
    party = {"neighbour": neighbour, "itself": 1, "zero": 0, "beyond-n": SPARSE_N + 1, "max-u32": 2**32 - 1}
    if case == "repeated":
        bad = members + (members[0],)
    else:
        bad = (dataclasses.replace(members[0], party=party[case]),) + members[1:]
    with mask_spy() as derived:
        assert_refuses(s.fresh_party1(), dataclasses.replace(s.routed1, members=bad).encode(), InconsistentSetsError)
    assert derived == []


@pytest.mark.parametrize("case", ["flipped", "other-task", "other-session", "no-members-root", "other-members-root",
                                  "other-identity", "relabelled"])
def test_a_member_entry_with_a_bad_signature_is_refused(case):
    """A member entry whose signature is not its member's over its keys for this session, task and members root is
    TaskMismatchError naming it; one presented under another identity or relabelled as another party no longer
    matches that party's leaf in the members list (InconsistentSetsError) — before any mask."""
    s = _sparse_session(min_verified={1: 60})
    c = s.cohort
    members = s.routed1.members
    m = members[5]
    key = c.identities[m.party]
    bind = crypto.binding(c.cfg.session_id, TASK_A)
    if case == "flipped":
        forged = dataclasses.replace(m, signature=bytes([m.signature[0] ^ 1]) + m.signature[1:])
    elif case == "other-task":
        bind = crypto.binding(c.cfg.session_id, TASK_B)
        forged = dataclasses.replace(m, signature=crypto.sign(key, crypto.advertise_payload(bind, m.party, m.c_pk,
                                                                                             m.s_pk)))
    elif case == "other-session":
        bind = crypto.binding(os.urandom(16), TASK_A)
        forged = dataclasses.replace(m, signature=crypto.sign(key, crypto.advertise_payload(bind, m.party, m.c_pk,
                                                                                             m.s_pk)))
    elif case in ("no-members-root", "other-members-root"):  # session and task right, the members root not
        other = bind if case == "no-members-root" else crypto.round_binding(bind, hashlib.sha256(b"other").digest())
        forged = dataclasses.replace(m, signature=crypto.sign(key, crypto.advertise_payload(other, m.party, m.c_pk,
                                                                                              m.s_pk)))
    elif case == "other-identity":  # a genuine signature, presented under another member's identity key
        forged = dataclasses.replace(m, identity=members[6].identity)
    else:  # member 6's genuine entry relabelled as another non-neighbour's
        forged = dataclasses.replace(members[6], party=m.party)
    bad = dataclasses.replace(s.routed1, members=members[:5] + (forged,) + members[6:]).encode()
    with mask_spy() as derived:
        if case in ("other-identity", "relabelled"):
            err = assert_refuses(s.fresh_party1(), bad, InconsistentSetsError)
            assert f"party {m.party}'s entry is not the one in the members list" in str(err)
        else:
            assert_refuses(s.fresh_party1(), bad, TaskMismatchError, party=m.party)
    assert derived == []


@pytest.mark.parametrize("active", [False, True], ids=["semi-honest", "active"])
def test_simulated_sessions_with_min_verified_for_every_party(active):
    """`run_session(min_verified=…)` as the service runs it on a sparse graph (n = 130, degree 44): every party asks for
    member entries and the session sums exactly; a floor above n makes the first party to check refuse."""
    cfg = SecAggConfig(os.urandom(16), 130, DIM, BITS, threat_model="active" if active else "semi_honest",
                       graph="sparse", degree=44)
    assert not cfg.uses_complete_graph
    rng = np.random.default_rng(130)
    inputs = {p: rng.integers(0, 1 << BITS, DIM, dtype=np.uint64) for p in range(1, 131)}
    report = run_session(cfg, inputs, task_digest=TASK_C, min_verified=cfg.neighbourhood_size + 20)
    assert report.result is not None
    assert np.array_equal(report.result.vector, expected_sum(inputs, range(1, 131), BITS))
    with pytest.raises(CohortUnverifiedError) as info:
        run_session(cfg, inputs, task_digest=TASK_C, min_verified=131)
    assert (info.value.verified, info.value.minimum) == (130, 131)


def test_min_verified_needs_the_means_to_verify():
    cfg = SecAggConfig(os.urandom(16), 5, DIM, BITS)
    key = Ed25519PrivateKey.generate()
    ids = {p: crypto.ed25519_public_bytes(key) for p in range(1, 6)}
    vec = np.zeros(DIM, dtype=np.uint64)
    for kwargs in ({"min_verified": 0}, {"min_verified": True}, {"min_verified": 3, "verify_peers": False},
                   {"min_verified": 3, "identity_key": None}):
        args = {"identity_key": key, "peer_identity_keys": ids, **kwargs}
        with pytest.raises(ConfigError, match="min_verified"):
            ClientSession(cfg, 1, vec, task_digest=TASK_A, **args)
    # no pinned identities: the device learns them from the members list (protocol 3)
    ClientSession(cfg, 1, vec, key, None, task_digest=TASK_A, min_verified=3)
    for bad in (b"", bytes(31), bytes(33), "00" * 32):
        with pytest.raises(ConfigError, match="task_digest"):
            ClientSession(cfg, 1, vec, key, ids, task_digest=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="task_digest"):
        crypto.binding(cfg.session_id, bytes(31))


# ---------------------------------------------------------------------------------------------------
# 6. Property: a session completes with the exact sum iff every party computed the same task.
# ---------------------------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(3, 12),
    active=st.booleans(),
    data=st.data(),
)
def test_a_session_sums_exactly_iff_every_party_has_the_same_task(n, active, data):
    """Random small cohorts, each party's digest drawn from {A, B, C} (mostly A), an honest relay: with one digest the
    session completes with the exact sum and every party verified the whole cohort; with two or more, parties raise
    TaskMismatchError at RoutedShares — each naming a sender whose digest differs from its own — and no party
    derives a mask, so no masked input is ever computed."""
    weights = st.sampled_from([TASK_A] * 4 + [TASK_B, TASK_C])
    digests = {p: data.draw(weights, label=f"digest {p}") for p in range(1, n + 1)}
    c = make_cohort(n, digests, active=active, server_digest=digests[1])
    with mask_spy() as derived:
        _, _, routed = c.to_routed()
        assert set(routed) == set(range(1, n + 1))
        refused: dict[int, int] = {}
        replies: dict[int, bytes] = {}
        for p, m in routed.items():
            try:
                replies[p] = c.clients[p].receive(m)
            except TaskMismatchError as exc:
                refused[p] = exc.party
                assert c.clients[p].phase is Phase.ABORTED
    if len(set(digests.values())) == 1:
        assert not refused and derived
        assert all(cl.verified_members == n for cl in c.clients.values())
        total = c.finish(c.advance(replies))
        assert np.array_equal(total, expected_sum(c.inputs, range(1, n + 1), BITS))
    else:
        assert derived == []  # not one mask key derived by anyone
        assert set(refused) == set(range(1, n + 1))  # complete graph: every party has a sender on another task
        assert all(digests[named] != digests[p] for p, named in refused.items())
        with pytest.raises(AbortError):
            c.advance({})


# ---------------------------------------------------------------------------------------------------
# 7. Regression (found in review): keys of peers the server then reports dropped were never verified.
# ---------------------------------------------------------------------------------------------------


def _show_party1_server_keys_for(peer_keys: dict[int, bytes], parties: tuple[int, ...], relist: bool = False
                                 ) -> dict[int, tuple]:
    """The server's move: in party 1's PeerKeys, the channel keys of `parties` become key pairs of its own (each
    entry keeps the genuine key signature it relays) — and, with `relist`, their leaves in the members list with them.
    Returns those pairs."""
    shown = decode(peer_keys[1])
    fake = {v: crypto.x25519_keypair() for v in parties}
    peers = tuple(dataclasses.replace(e, c_pk=fake[e.party][1]) if e.party in fake else e for e in shown.peers)
    peer_keys[1] = (relisted(shown, peers) if relist else dataclasses.replace(shown, peers=peers)).encode()
    return fake


def _own_keys(peer_keys: Mapping[int, bytes], party: int) -> tuple[bytes, bytes]:
    e = next(e for e in decode(peer_keys[party]).peers if e.party == party)
    return e.c_pk, e.s_pk


def _refused_and_nothing_of_party1_leaves(c: Cohort, peer_keys: dict[int, bytes], rest: set[int], relist: bool
                                          ) -> dict[int, bytes]:
    """Party 1 refuses its PeerKeys naming the first substituted peer — at its leaf in the members list, or (the list
    rewritten to match, `relist`) at its key signature — and seals no share; the server, routing the others' shares,
    holds no ciphertext from party 1 and no peer ever holds a share of party 1's secrets."""
    with seal_spy() as sealed, mask_spy() as derived:
        err = assert_refuses(c.clients[1], peer_keys[1], TaskMismatchError if relist else InconsistentSetsError)
        share_keys = c.reply(peer_keys, skip={1})
        routed = c.advance(share_keys)
    assert ("not signed by its identity key" if relist else "is not the one in the members list") in str(err)
    assert sealed and all(sender != 1 for sender, _ in sealed)  # the others sealed theirs; party 1 none
    assert 1 not in derived
    assert 1 not in share_keys and set(routed) == rest
    assert all(1 not in dict(decode(m).ciphertexts) for m in routed.values())
    return routed


def test_a_server_cannot_unmask_one_input_by_substituting_keys_of_peers_it_reports_dropped():
    """Regression guard. The gap it closes: a party checked the senders of its RoutedShares only, so
    peers that the server reports as dropped after PeerKeys were never verified, yet the party had already encrypted
    shares of b_u and s_u^SK to the keys it was shown for them. A server substituting its own keys for up to m − t
    such peers read m − t shares of both secrets; with split survivor views (semi-honest: no consistency round) it
    then needed only t honest answers in all and unmasked one device's input whenever 3t ≤ 2m (the semi-honest
    default t = ⌊m/2⌋ + 1).

    n = 5, complete graph, semi-honest (t = 3), every check on. The server shows party 1 its own keys for parties 4
    and 5, meaning to report them dropped to party 1 (RoutedShares from 2 and 3 only), decrypt party 1's shares for
    4 and 5, then ask party 2 for party 1's self-mask share (1 survived) and party 3 for its key share (1 dropped).
    Now party 1 checks each peer's entry against its leaf in the members list and its key signature at PeerKeys and
    refuses (InconsistentSetsError, or TaskMismatchError when the server rewrote the leaves to match, naming party 4)
    before sealing any share: the server gets no share of b_1 or s_1 for 4 and 5 — none at all — and the others
    complete without party 1. (A rewritten list would also give party 1 another members root than its peers, so their
    channel keys and signatures would no longer match either.) Counterpart: with both checks removed (and the genuine
    list, so that party 1's binding is its peers') the same attack recovers party 1's input exactly."""
    for relist in (False, True):
        c = make_cohort(5, TASK_A, relaying=False)
        peer_keys = c.advance({p: cl.start() for p, cl in c.clients.items()})
        _show_party1_server_keys_for(peer_keys, (4, 5), relist)
        routed = _refused_and_nothing_of_party1_leaves(c, peer_keys, {2, 3, 4, 5}, relist)
        total = c.finish(routed)
        assert c.server.result.contributors == frozenset({2, 3, 4, 5})
        assert np.array_equal(total, expected_sum(c.inputs, [2, 3, 4, 5], BITS))
        assert all(1 not in c.clients[w]._held for w in (2, 3, 4, 5))  # no share of party 1's secrets anywhere

    with without_peer_key_check():  # the client as it was: the attack goes through
        c = make_cohort(5, TASK_A, relaying=False)
        peer_keys = c.advance({p: cl.start() for p, cl in c.clients.items()})
        bind = view_binding(crypto.binding(c.cfg.session_id, TASK_A), decode(peer_keys[1]))
        own_c, own_s = _own_keys(peer_keys, 1)
        fake = _show_party1_server_keys_for(peer_keys, (4, 5))
        with without_members_check(decode(peer_keys[2]).leaves):
            share_keys = c.reply(peer_keys)
        routed = c.advance(share_keys)  # every signature genuine: the server accepts all
        b_shares: dict[int, int] = {}
        s_shares: dict[int, int] = {}
        for v in (4, 5):  # the server reads party 1's shares meant for 4 and 5
            key = crypto.channel_key(crypto.agree(fake[v][0], own_c), bind, 1, v)
            pt = crypto.open_share(key, bind, 1, v, dict(decode(share_keys[1]).ciphertexts)[v])
            b_shares[v], s_shares[v] = shamir.from_bytes(pt[8:41]), shamir.from_bytes(pt[41:74])
        r1 = decode(routed[1])
        keep = [i for i, (u, _) in enumerate(r1.ciphertexts) if u in (2, 3)]
        routed[1] = dataclasses.replace(r1, ciphertexts=tuple(r1.ciphertexts[i] for i in keep)).encode()
        masked = c.reply(routed, skip={4, 5})  # party 1 opens its two senders' shares and masks with them alone
        y1 = encoding.unpack(decode(masked[1]).packed, DIM, BITS, c.cfg.work_dtype).copy()
        # split survivor views: party 2 is told party 1 survived, party 3 that it dropped
        for w, survivors, kind, into in ((2, {1, 2, 3}, ShareKind.SELF_MASK_SEED, b_shares),
                                         (3, {2, 3, 4}, ShareKind.MASK_KEY, s_shares)):
            request = UnmaskRequest(c.cfg.session_id, w, encode_bitmap(survivors, 5), ())
            reply = decode(c.clients[w].receive(request.encode()))
            into[w] = next(shamir.from_bytes(s) for v, k, s in reply.shares if v == 1 and k == kind)
    rec = shamir.BatchReconstructor(c.cfg.share_threshold)
    b1 = shamir.secret_from_int(rec.reconstruct(b_shares, "b", "attack"))
    s1 = X25519PrivateKey.from_private_bytes(shamir.secret_from_int(rec.reconstruct(s_shares, "s", "attack")))
    assert crypto.x25519_public_of(crypto.x25519_private_bytes(s1)) == own_s
    stream = crypto.MaskStream(DIM, c.cfg.work_dtype)
    stream.add_into(y1, crypto.self_mask_key(b1, bind, 1), -1)
    for v in (2, 3):
        shared = s1.exchange(X25519PublicKey.from_public_bytes(_own_keys(peer_keys, v)[1]))
        stream.add_into(y1, crypto.pair_mask_key(shared, bind, 1, v), -1)
    recovered = y1.astype(np.uint64) & np.uint64(c.cfg.modulus_mask)
    assert np.array_equal(recovered, c.inputs[1]), "without the PeerKeys check the attack recovers party 1's input"


def test_active_model_a_server_needs_t_colluding_members_to_unmask_one_input():
    """Regression guard (active model). The gap it closes: the same unverified substitution of m − t peers the
    server reports dropped gave it m − t shares of s_u^SK for free, so a server colluding with 2t − m members of a
    neighbourhood (3 of 7 here) unmasked one device's input — docs/secagg.md puts the residual risk at ≥ t colluding
    members (5 of 7).

    n = 7, complete graph, active model (t = 5), every check on, consistency round included. The server shows
    party 1 its own keys for parties 6 and 7, meaning to report them dropped to party 1 and, with corrupted members
    2, 3 and 4 — fewer than t — handing over their shares of party 1's mask key, reach t shares. Now party 1 refuses
    at PeerKeys (at party 6's leaf in the members list, or its key signature when the list was rewritten to match)
    before sealing any share: the server gets no share of s_1 for 6 and 7, and the three colluders hold none either
    (party 1 never shared). Counterpart: with the PeerKeys checks removed, the three colluders and the server recover
    party 1's input exactly."""
    for relist in (False, True):
        c = make_cohort(7, TASK_A, active=True, relaying=False)
        peer_keys = c.advance({p: cl.start() for p, cl in c.clients.items()})
        _show_party1_server_keys_for(peer_keys, (6, 7), relist)
        routed = _refused_and_nothing_of_party1_leaves(c, peer_keys, {2, 3, 4, 5, 6, 7}, relist)
        total = c.finish(routed)
        assert c.server.result.contributors == frozenset(range(2, 8))
        assert np.array_equal(total, expected_sum(c.inputs, range(2, 8), BITS))
        assert all(1 not in c.clients[w]._held for w in range(2, 8))

    with without_peer_key_check():  # the client as it was: the attack goes through
        c = make_cohort(7, TASK_A, active=True, relaying=False)
        peer_keys = c.advance({p: cl.start() for p, cl in c.clients.items()})
        bind = view_binding(crypto.binding(c.cfg.session_id, TASK_A), decode(peer_keys[1]))
        own_c, _ = _own_keys(peer_keys, 1)
        fake = _show_party1_server_keys_for(peer_keys, (6, 7))
        with without_members_check(decode(peer_keys[2]).leaves):
            share_keys = c.reply(peer_keys)
        for p in (6, 7):  # the server drops 6 and 7 (they never see party 1's unreadable shares)
            share_keys.pop(p)
        routed = c.advance(share_keys)
        s_shares: dict[int, int] = {}
        for v in (6, 7):
            key = crypto.channel_key(crypto.agree(fake[v][0], own_c), bind, 1, v)
            pt = crypto.open_share(key, bind, 1, v, dict(decode(share_keys[1]).ciphertexts)[v])
            s_shares[v] = shamir.from_bytes(pt[41:74])
        masked = c.reply(routed)
        y1 = encoding.unpack(decode(masked[1]).packed, DIM, BITS, c.cfg.work_dtype).copy()
        unmask = c.advance(c.reply(c.advance(masked)))  # one consistent survivor set, signed by all five
        b_shares = {}
        for w in (1, 2, 3, 4, 5):
            reply = decode(c.clients[w].receive(unmask[w]))
            b_shares[w] = next(shamir.from_bytes(s) for v, k, s in reply.shares
                               if v == 1 and k == ShareKind.SELF_MASK_SEED)
        for w in (2, 3, 4):  # corrupted members hand over what they hold of party 1's mask key
            s_shares[w] = c.clients[w]._held[1][1]
    rec = shamir.BatchReconstructor(c.cfg.share_threshold)
    assert len(s_shares) == c.cfg.share_threshold == 5
    b1 = shamir.secret_from_int(rec.reconstruct(b_shares, "b", "attack"))
    s1 = X25519PrivateKey.from_private_bytes(shamir.secret_from_int(rec.reconstruct(s_shares, "s", "attack")))
    stream = crypto.MaskStream(DIM, c.cfg.work_dtype)
    stream.add_into(y1, crypto.self_mask_key(b1, bind, 1), -1)
    for v in (2, 3, 4, 5):
        shared = s1.exchange(X25519PublicKey.from_public_bytes(_own_keys(peer_keys, v)[1]))
        stream.add_into(y1, crypto.pair_mask_key(shared, bind, 1, v), -1)
    recovered = y1.astype(np.uint64) & np.uint64(c.cfg.modulus_mask)
    assert np.array_equal(recovered, c.inputs[1]), "without the PeerKeys check 3 colluders and the server unmask"
