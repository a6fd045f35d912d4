"""Credentialed members (docs/identities.md): a device counts toward `min_verified` only peers for which the server
relayed an identity token that an issuer it trusts signed for that peer's identity key.

The attack: a server fills a cohort with members it made itself (it holds their identity keys, so their signatures
verify) so that one real device's input is the only unknown of the sum. The server cannot mint tokens, so its
members count for nothing, and the real device refuses (CohortUnverifiedError) before deriving any mask.
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
from secagg.messages import RoutedShares, decode
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


def _run_to_routed(tokens: dict[int, bytes] | None) -> tuple[dict[int, ClientSession], ServerSession, dict[int, bytes],
                                                              dict[int, np.ndarray]]:
    """A complete-graph cohort of N whose server relays `tokens`; every party wants all N verified and credentialed."""
    cfg = SecAggConfig(os.urandom(16), N, DIM, BITS)
    ids = {p: Ed25519PrivateKey.generate() for p in range(1, N + 1)}
    public = {p: crypto.ed25519_public_bytes(k) for p, k in ids.items()}
    rng = np.random.default_rng(0)
    inputs = {p: rng.integers(0, 1 << BITS, DIM, dtype=np.uint64) for p in public}
    if tokens is not None:
        tokens = {p: t(public[p]) if callable(t) else t for p, t in tokens.items()}
    clients = {p: ClientSession(cfg, p, inputs[p], ids[p], public, task_digest=TASK, min_verified=N,
                                credentialed=_credentialed) for p in public}
    server = ServerSession(cfg, public, task_digest=TASK, identity_tokens=tokens)

    def advance(out: dict[int, bytes]) -> dict[int, bytes]:
        for p, m in out.items():
            server.receive(p, m)
        return server.close_phase()

    peer_keys = advance({p: c.start() for p, c in clients.items()})
    routed = advance({p: clients[p].receive(m) for p, m in peer_keys.items()})
    return clients, server, routed, inputs


def test_a_cohort_of_credentialed_devices_sums_exactly() -> None:
    issuer = _issuer("trusted")
    clients, server, routed, inputs = _run_to_routed({p: (lambda pk: _token(issuer, pk)) for p in range(1, N + 1)})
    assert len(decode(routed[1]).sender_tokens) == N - 1
    incoming = routed
    while server.phase is not Phase.DONE:
        replies = {p: clients[p].receive(m) for p, m in incoming.items()}
        for p, r in replies.items():
            if r is not None:
                server.receive(p, r)
        incoming = server.close_phase()
    assert all(c.verified_members == N for c in clients.values())
    assert server.result is not None
    assert np.array_equal(server.result.vector, expected_sum(inputs, range(1, N + 1), BITS))


@pytest.mark.parametrize("invented", [1, 3, N - 1])
def test_members_the_server_invented_do_not_count(invented: int) -> None:
    """Parties 2.. hold tokens from a rogue issuer (the server's own): each signs for the session, none counts."""
    good, rogue = _issuer("trusted"), _issuer("rogue")
    tokens = {p: (lambda pk, key=(rogue if p > N - invented else good): _token(key, pk)) for p in range(1, N + 1)}
    clients, _, routed, _ = _run_to_routed(tokens)
    with pytest.raises(CohortUnverifiedError) as info:
        clients[1].receive(routed[1])
    assert (info.value.verified, info.value.minimum) == (N - invented, N)
    assert clients[1].phase is Phase.ABORTED


@pytest.mark.parametrize(("change", "counted"), [("withhold", 1), ("swap", N - 2)])
def test_a_server_that_withholds_or_swaps_tokens_gains_nothing(change: str, counted: int) -> None:
    """Without the token section no peer counts; with two peers' tokens swapped, those two do not."""
    good = _issuer("trusted")
    clients, _, routed, _ = _run_to_routed({p: (lambda pk: _token(good, pk)) for p in range(1, N + 1)})
    msg = decode(routed[1])
    assert isinstance(msg, RoutedShares)
    t = msg.sender_tokens
    altered = dataclasses.replace(msg, sender_tokens=(), member_tokens=()) if change == "withhold" else \
        dataclasses.replace(msg, sender_tokens=(t[1], t[0], *t[2:]))
    with pytest.raises(CohortUnverifiedError) as info:
        clients[1].receive(altered.encode())
    assert info.value.verified == counted


def test_tokens_need_every_party_and_identities() -> None:
    cfg = SecAggConfig(os.urandom(16), 3, DIM, BITS)
    ids = {p: crypto.ed25519_public_bytes(Ed25519PrivateKey.generate()) for p in (1, 2, 3)}
    with pytest.raises(ConfigError, match="missing \\[3\\]"):
        ServerSession(cfg, ids, identity_tokens={1: b"t", 2: b"t"})
    with pytest.raises(ConfigError, match="need identity_public_keys"):
        ServerSession(cfg, None, identity_tokens={1: b"t", 2: b"t", 3: b"t"})
