"""Identity tokens (secagg.identity_token): a token vouches for exactly one identity key under a trusted issuer."""

from __future__ import annotations

from functools import cache

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from hypothesis import given, settings
from hypothesis import strategies as st

from secagg import blind_rsa, identity_token
from secagg.identity_token import IdentityToken, TokenError


@cache
def _issuer() -> rsa.RSAPrivateKey:
    return blind_rsa.generate_key()


def _issue(identity: bytes, issuer: rsa.RSAPrivateKey | None = None) -> bytes:
    key = issuer or _issuer()
    pending = identity_token.request(key.public_key(), identity)
    return pending.finalize(blind_rsa.blind_sign(key, pending.blinded_msg)).encode()


def _trusted() -> dict[bytes, rsa.RSAPublicKey]:
    return identity_token.trusted_keys([_issuer().public_key()])


@settings(max_examples=10, deadline=None)
@given(identity=st.binary(min_size=32, max_size=32), other=st.binary(min_size=32, max_size=32))
def test_a_token_vouches_for_its_identity_key_only(identity: bytes, other: bytes) -> None:
    raw = _issue(identity)
    assert len(raw) == identity_token.TOKEN_BYTES
    token = identity_token.verify(raw, identity, _trusted())
    assert token.token_key_id == identity_token.key_id(_issuer().public_key())
    if other != identity:
        with pytest.raises(TokenError, match="another identity key"):
            identity_token.verify(raw, other, _trusted())


def test_a_token_from_an_untrusted_issuer_is_refused() -> None:
    rogue = blind_rsa.generate_key()
    raw = _issue(b"\x01" * 32, rogue)
    with pytest.raises(TokenError, match="does not trust"):
        identity_token.verify(raw, b"\x01" * 32, _trusted())


def test_a_forged_token_is_refused() -> None:
    """Someone without the issuer key (the server, a device) relabels a rogue token with the trusted key id."""
    rogue = blind_rsa.generate_key()
    token = IdentityToken.decode(_issue(b"\x02" * 32, rogue))
    relabelled = IdentityToken(token.nonce, token.challenge, identity_token.key_id(_issuer().public_key()),
                               token.authenticator)
    with pytest.raises(TokenError, match="does not verify"):
        identity_token.verify(relabelled.encode(), b"\x02" * 32, _trusted())
    raw = bytearray(_issue(b"\x02" * 32))
    raw[5] ^= 1  # the nonce
    with pytest.raises(TokenError, match="does not verify"):
        identity_token.verify(bytes(raw), b"\x02" * 32, _trusted())


def test_the_issuers_answer_is_checked_before_the_token_is_kept() -> None:
    pending = identity_token.request(_issuer().public_key(), b"\x03" * 32)
    wrong = blind_rsa.blind_sign(blind_rsa.generate_key(), pending.blinded_msg[:0] + bytes(255) + b"\x01")
    with pytest.raises(TokenError, match="not a valid token"):
        pending.finalize(wrong)


def test_malformed_tokens_name_the_problem() -> None:
    with pytest.raises(TokenError, match="is 354 bytes, got 3"):
        identity_token.verify(b"abc", b"\x01" * 32, _trusted())
    raw = bytearray(_issue(b"\x01" * 32))
    raw[1] = 7
    with pytest.raises(TokenError, match="token_type must be 2, got 7"):
        IdentityToken.decode(bytes(raw))
    with pytest.raises(TokenError, match="32 bytes"):
        identity_token.challenge_digest(b"short")
