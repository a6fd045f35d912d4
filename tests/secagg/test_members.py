"""Devices that set their own safety floor (issue 46, device protocol 3): the floor a device checks, the members list
whose root seeds the graph and joins the binding, credentialed neighbourhoods, and consistency under split survivor
sets — each against a server that breaks the rules, played by hand (in the style of test_adversarial.py).

Each test's docstring names the defence it guards; each fails when that defence is switched off (checked by hand
when the test was written: the guarded check in `secagg/client.py` disabled, the test run and seen failing, the check
restored). Clients here, as the service's devices, are given no pinned peer identities: they learn them from the
members list.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from secagg import (
    AbortError,
    ClientSession,
    CohortUnverifiedError,
    DecryptionError,
    InconsistentSetsError,
    SecAggConfig,
    ServerSession,
    TaskMismatchError,
    WrongPhaseError,
    crypto,
    encoding,
    floor,
    shamir,
)
from secagg.errors import InconsistentSurvivorsError
from secagg.floor import Assumptions, UnsafeParametersError
from secagg.identity_token import TOKEN_BYTES
from secagg.messages import (
    ConsistencyRequest,
    ShareKind,
    UnmaskRequest,
    decode,
    encode_bitmap,
)
from secagg.phases import Phase
from tests.secagg.members_lists import entry_leaf, leaf_of, relisted, with_leaf
from tests.secagg.test_adversarial import DIGEST, Cohort
from tests.secagg.test_task_binding import RelayingServer, mask_spy, seal_spy

DIM, BITS = 4, 16
FLOOR = Assumptions()
"""The device defaults: γ = 1/3, δ = 0.15, 2^-40 with 40 bits of grinding."""


def cohort(n: int, *, active: bool = True, degree: int | None = None, threshold: int | None = None,
           server: type[ServerSession] = ServerSession, verify: bool = True, tokens: dict[int, bytes] | None = None,
           **client_kwargs) -> Cohort:
    """n parties with identity keys, none pinned (the service's devices learn identities from the members list)."""
    cfg = SecAggConfig(os.urandom(16), n, DIM, BITS, threat_model="active" if active else "semi_honest",
                       graph="sparse" if degree is not None and degree < n - 1 else "auto", degree=degree,
                       threshold=threshold)
    rng = np.random.default_rng(n)
    inputs = {p: rng.integers(0, 1 << BITS, DIM, dtype=np.uint64) for p in range(1, n + 1)}
    identities = {p: Ed25519PrivateKey.generate() for p in inputs}
    public = {p: crypto.ed25519_public_bytes(k) for p, k in identities.items()}
    clients = {p: ClientSession(cfg, p, v, identities[p], task_digest=DIGEST, verify_peers=verify, **client_kwargs)
               for p, v in inputs.items()}
    return Cohort(cfg, inputs, clients, server(cfg, public, task_digest=DIGEST, identity_tokens=tokens), identities)


def refuses(client: ClientSession, message: bytes, error: type[Exception], match: str | None = None) -> Exception:
    """The client refuses `message` with `error` having sealed no share and derived no mask, and abandons the session:
    no reply now, none on a retry."""
    with seal_spy() as sealed, mask_spy() as derived:
        with pytest.raises(error, match=match) as info:
            client.receive(message)
        with pytest.raises(WrongPhaseError):
            client.receive(message)
    assert sealed == [] and derived == []
    assert client.phase is Phase.ABORTED
    return info.value


# ---------------------------------------------------------------------------------------------------
# 1. The floor a device computes for itself.
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "kwargs", "reason"), [
    (7, {"threat_model": "semi_honest"}, "^threat model"),
    (21, {"threat_model": "semi_honest", "threshold": 15}, "^threat model"),  # even with the active threshold
    (1000, {"graph": "sparse", "degree": 2, "threshold": 3}, "^degree"),
    (1000, {"graph": "sparse", "degree": floor.safety_floor(1000).degree - 2}, "^degree"),
    (21, {"threshold": 14}, "^threshold"),  # one below ⌊(21 + 7)/2⌋ + 1
    (7, {"threshold": 4}, "^threshold"),  # one below ⌊(7 + 2)/2⌋ + 1
    (1000, {"degree": floor.plan(1000).degree, "threshold": floor.plan(1000).threshold - 1}, "^threshold"),
    (1000, {"degree": floor.safety_floor(1000).degree, "threshold": floor.safety_floor(1000).threshold - 1},
     "^threshold"),
], ids=["semi-honest", "semi-honest-21", "degree-2", "degree-below-floor", "complete-21-t-1", "complete-7-t-1",
        "plan-t-1", "floor-t-1"])
def test_a_device_with_a_floor_refuses_a_config_below_it(n, kwargs, reason):
    """Guards the floor check at construction (`ClientSession(floor_assumptions=…)`): a session without the
    consistency round (the semi-honest model), a sparse degree below the floor (2, or the floor's minus 2) and a
    threshold one below the floor's — on the complete graph and at the plan's and the floor's own sparse degrees — are
    refused with UnsafeParametersError naming what is short, before the device draws a key. Without assumptions (library
    use) the same configs are accepted; the defaults are."""
    cfg = SecAggConfig(os.urandom(16), n, DIM, BITS, **{"threat_model": "active", **kwargs})
    key = Ed25519PrivateKey.generate()
    with pytest.raises(UnsafeParametersError, match=reason):
        ClientSession(cfg, 1, np.zeros(DIM, dtype=np.uint64), key, floor_assumptions=FLOOR)
    ClientSession(cfg, 1, np.zeros(DIM, dtype=np.uint64), key)  # no floor: the library takes what it is given


@pytest.mark.parametrize("n", [2, 3, 7, 21, 100, 1000, 10_000])
def test_the_default_active_config_meets_the_default_floor(n):
    cfg = SecAggConfig(os.urandom(16), n, DIM, BITS, threat_model="active")
    ClientSession(cfg, 1, np.zeros(DIM, dtype=np.uint64), Ed25519PrivateKey.generate(), floor_assumptions=FLOOR)


def test_a_device_with_a_floor_completes_a_session_that_meets_it():
    c = cohort(7, floor_assumptions=FLOOR)
    assert c.t == 5
    incoming = c.advance({p: cl.start() for p, cl in c.clients.items()})
    while c.server.phase is not Phase.DONE:
        incoming = c.advance({p: r for p, r in c.reply(incoming).items() if r is not None})
    assert np.array_equal(c.server.result.vector, sum(c.inputs.values()) & np.uint64(c.cfg.modulus_mask))


# ---------------------------------------------------------------------------------------------------
# 2. The members list: its own leaf, its peers' leaves, the graph drawn from its root.
# ---------------------------------------------------------------------------------------------------


def _peer_keys(c: Cohort) -> dict[int, bytes]:
    return c.advance({p: cl.start() for p, cl in c.clients.items()})


@pytest.mark.parametrize("change", ["absent", "other-c_pk", "other-s_pk", "other-identity", "entry-and-leaf",
                                    "one-short", "one-more"])
def test_a_members_list_that_omits_or_alters_the_device_s_own_keys_is_refused(change):
    """Guards the own-leaf check (`_members_list`): the device finds its own leaf — over its party id, identity key and
    the keys it advertised — in the members list, and the list has one leaf per member of its cohort; otherwise
    InconsistentSetsError before any share. ("entry-and-leaf": the server shows the device other keys as its own, its
    own entry and leaf rewritten to match.)"""
    c = cohort(7)
    msg = decode(_peer_keys(c)[1])
    own = next(e for e in msg.peers if e.party == 1)
    _, fake = crypto.x25519_keypair()
    other_id = crypto.ed25519_public_bytes(Ed25519PrivateKey.generate())
    leaf = {"absent": crypto.ABSENT_LEAF,
            "other-c_pk": crypto.member_leaf(1, own.identity, fake, own.s_pk),
            "other-s_pk": crypto.member_leaf(1, own.identity, own.c_pk, fake),
            "other-identity": crypto.member_leaf(1, other_id, own.c_pk, own.s_pk)}.get(change)
    if leaf is not None:
        shown = dataclasses.replace(msg, leaves=with_leaf(msg.leaves, 1, leaf))
        match = "members list: this party's keys are missing or altered"
    elif change == "entry-and-leaf":
        shown = relisted(msg, tuple(dataclasses.replace(e, c_pk=fake) if e.party == 1 else e for e in msg.peers))
        match = "members list: this party's keys are missing or altered"
    else:
        leaves = msg.leaves[: -crypto.MEMBER_LEAF_BYTES] if change == "one-short" else msg.leaves + crypto.ABSENT_LEAF
        shown = dataclasses.replace(msg, leaves=leaves)
        match = f"members list: {6 if change == 'one-short' else 8} leaves for a cohort of 7"
    refuses(c.clients[1], shown.encode(), InconsistentSetsError, match)


@pytest.mark.parametrize("change", ["sybil-identity", "c_pk", "s_pk", "another-party-s-entry"])
def test_a_peer_entry_that_does_not_match_its_leaf_is_refused(change):
    """Guards the entry-against-leaf check (`_on_peer_keys`): every entry the device is shown must be the one the
    members list holds for that party, or InconsistentSetsError naming it before any share. "sybil-identity" is the
    case only this check stops: the server puts an identity of its own on party 3's genuine keys, with a valid key
    signature by that identity (the key-signature check passes; the device would count the sybil as party 3)."""
    c = cohort(7)
    msg = decode(_peer_keys(c)[1])
    e3 = next(e for e in msg.peers if e.party == 3)
    _, fake = crypto.x25519_keypair()
    if change == "sybil-identity":
        sybil = Ed25519PrivateKey.generate()
        forged = dataclasses.replace(e3, identity=crypto.ed25519_public_bytes(sybil),
                                     signature=crypto.sign(sybil, crypto.keys_payload(e3.c_pk, e3.s_pk)))
    elif change == "another-party-s-entry":  # party 4's genuine keys, identity and key signature, labelled party 3
        forged = dataclasses.replace(next(e for e in msg.peers if e.party == 4), party=3)
    else:
        forged = dataclasses.replace(e3, **{change: fake})
    peers = tuple(forged if e.party == 3 else e for e in msg.peers)
    if change == "another-party-s-entry":
        peers = tuple(e for e in peers if e.party != 4 or e is forged)
    refuses(c.clients[1], dataclasses.replace(msg, peers=peers).encode(), InconsistentSetsError,
            "party 3's entry is not the one in the members list")


def test_a_peer_outside_the_neighbourhood_drawn_from_the_root_is_refused():
    """Guards the neighbourhood check against the graph drawn from the members root (`_members_list` →
    `_on_peer_keys`): a sparse cohort (n = 30, degree 6) whose server shows party 1 the neighbourhood of another graph
    — the one the session id alone would have seeded (protocol 2), made of genuine entries that match their leaves —
    or its true neighbourhood plus one genuine stranger, is refused (InconsistentSetsError: not neighbours) before any
    share. The true neighbourhood is accepted."""
    c = cohort(30, active=False, degree=6)
    peer_keys = _peer_keys(c)
    genuine = {e.party: e for m in peer_keys.values() for e in decode(m).peers}
    msg = decode(peer_keys[1])
    assert {e.party for e in msg.peers} == set(c.server.graph.closed(1))
    old_graph = c.cfg.neighbour_graph(crypto.hkdf(c.sid, crypto.DOMAIN + b"graph"))  # protocol 2's seed
    assert set(old_graph.closed(1)) != set(c.server.graph.closed(1))
    as_before = dataclasses.replace(msg, peers=tuple(genuine[v] for v in old_graph.closed(1)))
    refuses(c.clients[1], as_before.encode(), InconsistentSetsError, "not neighbours")
    c2 = cohort(30, active=False, degree=6)
    peer_keys2 = _peer_keys(c2)
    msg2 = decode(peer_keys2[1])
    stranger = next(v for v in range(1, 31) if v not in c2.server.graph.closed(1))
    extra = next(e for e in decode(peer_keys2[stranger]).peers if e.party == stranger)
    assert leaf_of(msg2.leaves, stranger) == entry_leaf(extra)  # a genuine entry, matching its leaf
    refuses(c2.clients[1], dataclasses.replace(msg2, peers=msg2.peers + (extra,)).encode(), InconsistentSetsError,
            "not neighbours")
    assert c2.clients[2].receive(peer_keys2[2]) is not None


def _split_lists(verify: bool) -> tuple[Cohort, dict[int, bytes]]:
    """n = 6, party 6 never advertises; a relaying server shows parties 1 and 2 a members list with a phantom leaf for
    party 6 (an entry nobody is shown: they accept it as a member that did not make it into their neighbourhood) and
    the others the genuine list (party 6 absent). Returns the cohort and the RoutedShares."""
    c = cohort(6, active=False, server=RelayingServer, verify=verify)
    peer_keys = c.advance({p: c.clients[p].start() for p in range(1, 6)})
    phantom = os.urandom(crypto.MEMBER_LEAF_BYTES)
    for p in (1, 2):
        shown = decode(peer_keys[p])
        assert leaf_of(shown.leaves, 6) == crypto.ABSENT_LEAF
        peer_keys[p] = dataclasses.replace(shown, leaves=with_leaf(shown.leaves, 6, phantom)).encode()
    return c, c.advance(c.reply(peer_keys))


def test_devices_shown_different_member_lists_cannot_finish():
    """Guards the members root in the binding (`crypto.round_binding`): parties 1–2 and 3–5 were shown different
    members lists (a phantom member 6), so their roots differ. With a server that relays every share, each party
    refuses at RoutedShares — the shares of the other group were sealed under channel keys bound to another members
    root: TaskMismatchError naming a sender of that group — before deriving any mask; with the checks off the same
    failure is a plain DecryptionError. Either way no masked input exists and the cohort aborts: nothing is released.
    (Control: the same cohort shown one list completes.)"""
    for verify, error in ((True, TaskMismatchError), (False, DecryptionError)):
        c, routed = _split_lists(verify)
        with mask_spy() as derived:
            for p in range(1, 6):
                with pytest.raises(error) as info:
                    c.clients[p].receive(routed[p])
                if verify:
                    assert (info.value.party in (3, 4, 5)) == (p in (1, 2))
                    assert "share does not open" in str(info.value)
                else:
                    assert not isinstance(info.value, TaskMismatchError)
        assert derived == []
        with pytest.raises(AbortError):
            c.advance({})
    c = cohort(6, active=False, server=RelayingServer)
    incoming = c.advance({p: c.clients[p].start() for p in range(1, 6)})
    while c.server.phase is not Phase.DONE:
        incoming = c.advance({p: r for p, r in c.reply(incoming).items() if r is not None})
    assert c.server.result.contributors == frozenset(range(1, 6))


# ---------------------------------------------------------------------------------------------------
# 3. Credentialed neighbourhoods: members the server invented do not count toward the threshold.
# ---------------------------------------------------------------------------------------------------


def _credentialed(identity: bytes, token: bytes) -> bool:
    """A stand-in for an issuer check (test_identity_credentials.py uses real tokens): a token is valid when it is
    derived from the identity under a label the invented members' server does not use."""
    return token == _token_for(identity)


def _token_for(identity: bytes) -> bytes:
    return (hashlib.sha256(b"test_members/issuer/" + identity).digest() * 12)[:TOKEN_BYTES]


@pytest.mark.parametrize("with_floor", [False, True], ids=["credentialed", "credentialed-and-floor"])
@pytest.mark.parametrize("invented", [3, 5])
def test_a_neighbourhood_of_invented_identities_is_refused_before_any_share(invented, with_floor):
    """Guards the credentialed threshold (`_on_peer_keys`: token holders ≥ t, and the floor's `untrusted` count): n = 7,
    active, t = 5; the server invented the last `invented` members (it holds their identity keys — their signatures
    verify — but no issuer vouched for them: no valid token). Party 1 counts the token holders of its neighbourhood,
    itself included: 7 − `invented` < 5, so UnsafeParametersError at PeerKeys — before any share is encrypted: the
    ShareKeys reply is never produced. (With one invented member the neighbourhood holds 6 ≥ t and party 1 goes on;
    with a floor too, one untrusted member is within the ⌊7/3⌋ = 2 corrupt ones it assumes.)"""
    n = 7
    c = cohort(n, credentialed=_credentialed, floor_assumptions=FLOOR if with_floor else None)
    tokens = {p: _token_for(pk) if p <= n - invented else b"" for p, pk in c.public_ids.items()}
    c.server = ServerSession(c.cfg, c.public_ids, task_digest=DIGEST, identity_tokens=tokens)
    peer_keys = _peer_keys(c)
    err = refuses(c.clients[1], peer_keys[1], UnsafeParametersError, "^threshold")
    if not with_floor:
        assert f"{n - invented} of this party's {n} neighbours" in str(err)

    c = cohort(n, credentialed=_credentialed, floor_assumptions=FLOOR if with_floor else None)
    tokens = {p: _token_for(pk) if p < n else b"" for p, pk in c.public_ids.items()}
    c.server = ServerSession(c.cfg, c.public_ids, task_digest=DIGEST, identity_tokens=tokens)
    assert c.clients[1].receive(_peer_keys(c)[1]) is not None


# ---------------------------------------------------------------------------------------------------
# 4. Two survivor sets (active model): the consistency round.
# ---------------------------------------------------------------------------------------------------


def _unmask_input(c: Cohort, v: int, b: dict[int, int], s: dict[int, int], masked_v: bytes) -> np.ndarray:
    """What a server holding t shares of both of v's secrets computes: v's input, from its masked input."""
    rec = shamir.BatchReconstructor(c.t)
    seed = shamir.secret_from_int(rec.reconstruct(b, "b", "attack"))
    s_sk = X25519PrivateKey.from_private_bytes(shamir.secret_from_int(rec.reconstruct(s, "s", "attack")))
    y = encoding.unpack(decode(masked_v).packed, c.cfg.dim, c.cfg.bits, c.cfg.work_dtype).copy()
    stream = crypto.MaskStream(c.cfg.dim, c.cfg.work_dtype)
    stream.add_into(y, crypto.self_mask_key(seed, c.round_bind, v), -1)
    for u in range(1, c.cfg.n + 1):
        if u != v:
            shared = s_sk.exchange(X25519PublicKey.from_public_bytes(c.server._keys[u].s_pk))
            stream.add_into(y, crypto.pair_mask_key(shared, c.round_bind, v, u), -1 if v < u else +1)
    return y.astype(np.uint64) & np.uint64(c.cfg.modulus_mask)


def _two_survivor_sets(colluders: int, pad: bool = False):
    """n = 21, active, complete graph, t = ⌊(21 + 7)/2⌋ + 1 = 15 (2t − m = 9). The last `colluders` parties collude
    with the server (it holds their identity keys and every share they hold). The honest parties are split into A and B
    (A the larger when they do not split evenly); victims D = {1..6} are in A — n − t = 6 is the most a survivor set
    may omit: one dropping the whole first half (10) would be refused by B for falling below t, before any consistency
    check, so "D dropped" is the strongest lie the consistency round has to catch. The server tells A "all 21 survived" and B "D dropped", collects each party's consistency signature, and sends
    each group the signatures on its own set (the colluders sign both) — with `pad`, also the other group's, as if
    they were on this set. Returns the cohort, the groups, each party's reply or error, and the masked inputs."""
    n = 21
    c = cohort(n)
    assert c.t == 15 and 2 * c.t - n == 9
    routed = c.advance(c.reply(c.advance({p: cl.start() for p, cl in c.clients.items()})))
    masked = c.reply(routed)
    c.advance(masked)
    honest = list(range(1, n - colluders + 1))
    split = (len(honest) + 1) // 2
    group_a, group_b = honest[:split], honest[split:]
    corrupt = list(range(n - colluders + 1, n + 1))
    victims = set(range(1, 7))
    assert victims <= set(group_a)
    sets = {"A": c.bitmap(set(range(1, n + 1))), "B": c.bitmap(set(range(1, n + 1)) - victims)}
    group = {**{p: "A" for p in group_a}, **{p: "B" for p in group_b}}
    sigs: dict[str, dict[int, bytes]] = {"A": {}, "B": {}}
    for p, g in group.items():
        reply = decode(c.clients[p].receive(ConsistencyRequest(c.sid, p, sets[g]).encode()))
        sigs[g][p] = reply.signature
    for g in ("A", "B"):
        for w in corrupt:
            sigs[g][w] = c.sign_survivors(w, sets[g])
    outcome: dict[int, object] = {}
    for p, g in group.items():
        other = "B" if g == "A" else "A"
        shown = dict(sigs[g])
        if pad:
            shown.update({w: s for w, s in sigs[other].items() if w not in shown})
        request = UnmaskRequest(c.sid, p, sets[g], tuple(sorted(shown.items())))
        try:
            outcome[p] = c.clients[p].receive(request.encode())
        except InconsistentSurvivorsError as exc:
            outcome[p] = exc
    return c, group_a, group_b, corrupt, victims, outcome, masked


def _gathered(c: Cohort, outcome: dict[int, object], corrupt: list[int], v: int) -> tuple[dict, dict]:
    """Every share of v's two secrets the server holds: what honest parties revealed, and both shares each colluder
    holds."""
    b: dict[int, int] = {}
    s: dict[int, int] = {}
    for p, out in outcome.items():
        if isinstance(out, bytes):
            for owner, kind, share in decode(out).shares:
                if owner == v:
                    (b if kind == ShareKind.SELF_MASK_SEED else s)[p] = shamir.from_bytes(share)
    for w in corrupt:
        b[w], s[w] = c.clients[w]._held[v]
    return b, s


@pytest.mark.parametrize("pad", [False, True], ids=["own-set-signatures", "padded-with-the-other-set-s"])
def test_two_survivor_sets_with_one_colluder_every_honest_device_refuses(pad):
    """Guards the consistency check at the unmask request (`_on_unmask_request`: t valid neighbour signatures over the
    very set the party signed): with one colluder, each survivor set gathers 10 honest signatures + 1 < t = 15, so
    every honest device refuses (InconsistentSurvivorsError) — whether shown only the valid signatures or padded with
    the other set's (which do not verify over its own) — and reveals no share: the server holds one share (the
    colluder's) of each victim's secrets and can reconstruct no victim's input."""
    c, group_a, group_b, corrupt, victims, outcome, _ = _two_survivor_sets(1, pad)
    assert len(group_a) == len(group_b) == 10
    for p in group_a + group_b:
        assert isinstance(outcome[p], InconsistentSurvivorsError), (p, outcome[p])
        assert c.clients[p].phase is Phase.ABORTED
    for v in victims:
        b, s = _gathered(c, outcome, corrupt, v)
        assert len(b) < c.t and len(s) < c.t


def test_two_survivor_sets_below_2t_minus_m_colluders_reveal_no_input():
    """The floor's security condition at its edge, one below: 8 colluders (2t − m − 1). A (7 honest) + 8 reach t on
    "all survived" and reveal the victims' self-mask shares; B (6 honest) + 8 fall one short on "D dropped" and refuse
    (InconsistentSurvivorsError), so the server holds only the colluders' 8 shares of each victim's mask key: no
    victim's input can be unmasked."""
    c, group_a, group_b, corrupt, victims, outcome, _ = _two_survivor_sets(8)
    assert all(isinstance(outcome[p], bytes) for p in group_a)
    assert all(isinstance(outcome[p], InconsistentSurvivorsError) for p in group_b)
    for v in victims:
        b, s = _gathered(c, outcome, corrupt, v)
        assert len(b) >= c.t > len(s)


def test_two_survivor_sets_at_2t_minus_m_colluders_unmask_a_victim():
    """…and at it: 9 colluders (2t − m). Each set gathers 6 honest + 9 = 15 = t signatures, both groups unmask, and the
    server reconstructs both secrets of a victim and recovers its input exactly. This is why the floor requires that no
    honest party have 2t − m corrupt neighbours (`secagg.floor`; on the complete graph, 2t − m > ⌊γ·n⌋)."""
    c, group_a, group_b, corrupt, victims, outcome, masked = _two_survivor_sets(9)
    assert all(isinstance(outcome[p], bytes) for p in group_a + group_b)
    b, s = _gathered(c, outcome, corrupt, 1)
    assert len(b) >= c.t and len(s) >= c.t
    assert np.array_equal(_unmask_input(c, 1, b, s, masked[1]), c.inputs[1])
    assert 9 > floor.corrupt_count(21, FLOOR)  # beyond what the default floor assumes for 21


# ---------------------------------------------------------------------------------------------------
# 5. min_verified counts only members the survivor set lists.
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("dropped", "passes"), [(0, True), (22, True), (23, False), (37, False)])
def test_member_entries_outside_the_survivor_set_do_not_count_toward_min_verified(dropped, passes):
    """Guards the count at the survivor set (`_survivors`): party 1 (min_verified 60) verified 45 neighbours + 37 member
    entries = 82 identities at RoutedShares and sent its masked input; the server's survivor set then leaves out
    `dropped` of those members (as if they dropped after sharing keys: they are not in the sum). Party 1 counts again,
    among the members listed: 82 − 23 = 59 < 60 is CohortUnverifiedError before it reveals a single share; with 22 left
    out (60) it answers."""
    from tests.secagg.test_task_binding import _sparse_session

    s = _sparse_session(min_verified={1: 60})
    party1 = s.fresh_party1()
    assert party1.receive(s.routed[1]) is not None and party1.verified_members == 82
    members = [m.party for m in s.routed1.members]
    survivors = set(range(1, s.cohort.cfg.n + 1)) - set(members[:dropped])
    request = UnmaskRequest(s.cohort.cfg.session_id, 1, encode_bitmap(survivors, s.cohort.cfg.n), ())
    if passes:
        assert party1.receive(request.encode()) is not None
        return
    with pytest.raises(CohortUnverifiedError) as info:
        party1.receive(request.encode())
    assert (info.value.verified, info.value.minimum) == (82 - dropped, 60)
    assert party1.phase is Phase.ABORTED and party1._revealed == {}


def test_neighbours_outside_the_survivor_set_do_not_count_either():
    """The same on the complete graph, active model (n = 8, t = 6, min_verified 8): all 8 verified at RoutedShares; a
    consistency request listing 7 survivors is refused (CohortUnverifiedError: 7 of 8) before party 1 signs it."""
    c = cohort(8, min_verified=8)
    routed = c.advance(c.reply(c.advance({p: cl.start() for p, cl in c.clients.items()})))
    c.reply(routed)
    request = ConsistencyRequest(c.sid, 1, c.bitmap(set(range(1, 8))))
    with pytest.raises(CohortUnverifiedError) as info:
        c.clients[1].receive(request.encode())
    assert (info.value.verified, info.value.minimum) == (7, 8)
    assert c.clients[2].receive(ConsistencyRequest(c.sid, 2, c.bitmap(set(range(1, 9)))).encode()) is not None
