"""Credentialed members (docs/identities.md): a device counts toward `min_verified` — and toward the share threshold of
its neighbourhood — only peers for which the server relayed an identity token that an issuer it trusts signed for that
peer's identity key (protocol 3: each peer's token rides in its PeerKeys entry, each member entry's in RoutedShares).

The attack: a server fills a cohort with members it made itself (it holds their identity keys, so their signatures
verify) so that one real device's input is the only unknown of the sum. The server cannot mint tokens, so its
members count for nothing: with fewer token holders than the threshold in its neighbourhood the real device refuses
at PeerKeys (UnsafeParametersError) before it encrypts a share; with enough of them but fewer than `min_verified`, it
refuses (CohortUnverifiedError) before deriving any mask.
"""

from __future__ import annotations

import dataclasses
import os
from functools import cache

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

from secagg import ClientSession, CohortUnverifiedError, ConfigError, SecAggConfig, ServerSession, blind_rsa, crypto
from secagg import identity_token
from secagg.floor import UnsafeParametersError
from secagg.messages import PeerKeys, decode
from secagg.phases import Phase
from secagg.simulate import expected_sum

N, DIM, BITS = 6, 3, 16
TASK = bytes(32)


@cache
def _issuer(name: str) -> RSAPrivateKey:
    return blind_rsa.generate_key()


def _token(issuer: RSAPrivateKey, identity: bytes) -> bytes:
    pending = identity_token.request(issuer.public_key(), identity)
    return pending.finalize(blind_rsa.blind_sign(issuer, pending.blinded_msg)).encode()


def _credentialed(identity: bytes, token: bytes) -> bool:
    try:
        identity_token.verify(token, identity, identity_token.trusted_keys([_issuer("trusted").public_key()]))
    except identity_token.TokenError:
        return False
    return True


def _run_to_peer_keys(tokens: dict[int, bytes] | None) -> tuple[dict[int, ClientSession], ServerSession,
                                                                dict[int, bytes], dict[int, np.ndarray]]:
    """A complete-graph cohort of N (semi-honest, t = 4) whose server relays `tokens`; every party wants all N verified
    and credentialed. Returns the PeerKeys."""
    cfg = SecAggConfig(os.urandom(16), N, DIM, BITS)
    assert cfg.share_threshold == 4
    ids = {p: Ed25519PrivateKey.generate() for p in range(1, N + 1)}
    public = {p: crypto.ed25519_public_bytes(k) for p, k in ids.items()}
    rng = np.random.default_rng(0)
    inputs = {p: rng.integers(0, 1 << BITS, DIM, dtype=np.uint64) for p in public}
    if tokens is not None:
        tokens = {p: t(public[p]) if callable(t) else t for p, t in tokens.items()}
    clients = {p: ClientSession(cfg, p, inputs[p], ids[p], task_digest=TASK, min_verified=N,
                                credentialed=_credentialed) for p in public}
    server = ServerSession(cfg, public, task_digest=TASK, identity_tokens=tokens)
    for p, c in clients.items():
        server.receive(p, c.start())
    return clients, server, server.close_phase(), inputs


def _advance(server: ServerSession, out: dict[int, bytes]) -> dict[int, bytes]:
    for p, m in out.items():
        server.receive(p, m)
    return server.close_phase()


def test_a_cohort_of_credentialed_devices_sums_exactly() -> None:
    issuer = _issuer("trusted")
    clients, server, peer_keys, inputs = _run_to_peer_keys(
        {p: (lambda pk: _token(issuer, pk)) for p in range(1, N + 1)})
    shown = decode(peer_keys[1])
    assert isinstance(shown, PeerKeys) and all(len(e.token) == identity_token.TOKEN_BYTES for e in shown.peers)
    incoming = _advance(server, {p: clients[p].receive(m) for p, m in peer_keys.items()})
    while server.phase is not Phase.DONE:
        replies = {p: clients[p].receive(m) for p, m in incoming.items()}
        incoming = _advance(server, {p: r for p, r in replies.items() if r is not None})
    assert all(c.verified_members == N for c in clients.values())
    assert server.result is not None
    assert np.array_equal(server.result.vector, expected_sum(inputs, range(1, N + 1), BITS))


@pytest.mark.parametrize("invented", [1, 2, 3, N - 1])
def test_members_the_server_invented_do_not_count(invented: int) -> None:
    """The last `invented` parties hold tokens from a rogue issuer (the server's own): each signs for the session, none
    counts. With at least t = 4 token holders (itself included) party 1 goes on and refuses at RoutedShares
    (CohortUnverifiedError: N − invented of N); with fewer it refuses at PeerKeys (UnsafeParametersError), before
    sealing a share."""
    good, rogue = _issuer("trusted"), _issuer("rogue")
    tokens = {p: (lambda pk, key=(rogue if p > N - invented else good): _token(key, pk)) for p in range(1, N + 1)}
    clients, server, peer_keys, _ = _run_to_peer_keys(tokens)
    if N - invented < 4:
        with pytest.raises(UnsafeParametersError, match=f"{N - invented} of this party's {N} neighbours"):
            clients[1].receive(peer_keys[1])
        assert clients[1].phase is Phase.ABORTED
        return
    routed = _advance(server, {p: clients[p].receive(m) for p, m in peer_keys.items()})
    with pytest.raises(CohortUnverifiedError) as info:
        clients[1].receive(routed[1])
    assert (info.value.verified, info.value.minimum) == (N - invented, N)
    assert clients[1].phase is Phase.ABORTED


@pytest.mark.parametrize(("change", "counted"), [("withhold", 1), ("swap", N - 2), ("withhold-two", N - 2)])
def test_a_server_that_withholds_or_swaps_tokens_gains_nothing(change: str, counted: int) -> None:
    """The tokens travel in PeerKeys entries, outside the members list (leaves bind identity and keys, not tokens), so
    a server may drop or swap them freely — and gains nothing: without tokens no peer counts (fewer token holders than
    t: refused at PeerKeys); with two peers' tokens swapped, or withheld, those two do not count (refused at
    RoutedShares)."""
    good = _issuer("trusted")
    clients, server, peer_keys, _ = _run_to_peer_keys({p: (lambda pk: _token(good, pk)) for p in range(1, N + 1)})
    msg = decode(peer_keys[1])
    assert isinstance(msg, PeerKeys)
    by_party = {e.party: e for e in msg.peers}
    if change == "withhold":
        peers = tuple(dataclasses.replace(e, token=b"") for e in msg.peers)
    elif change == "swap":
        peers = tuple(dataclasses.replace(e, token=by_party[{2: 3, 3: 2}.get(e.party, e.party)].token) for e in msg.peers)
    else:
        peers = tuple(dataclasses.replace(e, token=b"") if e.party in (2, 3) else e for e in msg.peers)
    altered = dataclasses.replace(msg, peers=peers).encode()
    if counted < 4:
        with pytest.raises(UnsafeParametersError, match="hold a valid issuer token"):
            clients[1].receive(altered)
        return
    share_keys = {p: clients[p].receive(altered if p == 1 else m) for p, m in peer_keys.items()}
    routed = _advance(server, share_keys)
    with pytest.raises(CohortUnverifiedError) as info:
        clients[1].receive(routed[1])
    assert info.value.verified == counted


def test_tokens_need_every_party_and_identities() -> None:
    cfg = SecAggConfig(os.urandom(16), 3, DIM, BITS)
    ids = {p: crypto.ed25519_public_bytes(Ed25519PrivateKey.generate()) for p in (1, 2, 3)}
    with pytest.raises(ConfigError, match="missing \\[3\\]"):
        ServerSession(cfg, ids, identity_tokens={1: b"t", 2: b"t"})
    with pytest.raises(ConfigError, match="need identity_public_keys"):
        ServerSession(cfg, None, identity_tokens={1: b"t", 2: b"t", 3: b"t"})
