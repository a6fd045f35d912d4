"""RSA blind signatures (secagg.blind_rsa) against RFC 9474's known answers, and the properties tokens rely on."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from hypothesis import given, settings
from hypothesis import strategies as st

from secagg import blind_rsa
from secagg.blind_rsa import BlindSignatureError
from secagg.randomness import SeededRandom

VECTORS = json.loads((Path(__file__).parent / "data" / "rfc9474_vectors.json").read_text())
"""RFC 9474 Appendix A, as published with @cloudflare/blindrsa-ts (the PSS variants; PSSZERO has no salt)."""
PSS_VECTORS = [v for v in VECTORS if "PSSZERO" not in v["name"]]


def _int(x: str) -> int:
    return int(x, 16)


def _key(v: dict[str, str]) -> rsa.RSAPrivateKey:
    p, q, d, e = _int(v["p"]), _int(v["q"]), _int(v["d"]), _int(v["e"])
    pub = rsa.RSAPublicNumbers(e, p * q)
    return rsa.RSAPrivateNumbers(p, q, d, rsa.rsa_crt_dmp1(d, p), rsa.rsa_crt_dmq1(d, q), rsa.rsa_crt_iqmp(p, q),
                                 pub).private_key()


@cache
def _issuer() -> rsa.RSAPrivateKey:
    return blind_rsa.generate_key()


@pytest.mark.parametrize("v", PSS_VECTORS, ids=[v["name"] for v in PSS_VECTORS])
def test_rfc9474_known_answers(v: dict[str, str]) -> None:
    key = _key(v)
    pub = key.public_key()
    msg = bytes.fromhex(v["input_msg"])
    salt = bytes.fromhex(v["salt"])
    if "encoded_msg" in v:
        assert blind_rsa.emsa_pss_encode(msg, pub.key_size - 1, salt).hex() == v["encoded_msg"]
    r = pow(_int(v["inv"]), -1, pub.public_numbers().n)
    blinded = blind_rsa.blind(pub, msg, salt=salt, r=r)
    assert blinded.blinded_msg.hex() == v["blinded_msg"]
    assert int.from_bytes(blinded.inv, "big") == _int(v["inv"])
    blind_sig = blind_rsa.blind_sign(key, blinded.blinded_msg)
    assert blind_sig.hex() == v["blind_sig"]
    sig = blind_rsa.finalize(pub, msg, blind_sig, blinded.inv)
    assert sig.hex() == v["sig"]
    assert blind_rsa.verify(pub, msg, sig)


@settings(max_examples=15, deadline=None)
@given(msg=st.binary(max_size=200), seed=st.binary(min_size=1, max_size=8))
def test_round_trip_gives_a_standard_pss_signature_only_for_its_message(msg: bytes, seed: bytes) -> None:
    key = _issuer()
    pub = key.public_key()
    blinded = blind_rsa.blind(pub, msg, SeededRandom(seed))
    sig = blind_rsa.finalize(pub, msg, blind_rsa.blind_sign(key, blinded.blinded_msg), blinded.inv)
    assert blind_rsa.verify(pub, msg, sig)
    assert not blind_rsa.verify(pub, msg + b"x", sig)
    assert not blind_rsa.verify(pub, msg, sig[:-1] + bytes([sig[-1] ^ 1]))


def test_the_issuer_sees_a_fresh_value_for_the_same_message() -> None:
    """Two blindings of one message share nothing the issuer could match (the unlinkability tokens rely on)."""
    pub = _issuer().public_key()
    a, b = blind_rsa.blind(pub, b"same"), blind_rsa.blind(pub, b"same")
    assert a.blinded_msg != b.blinded_msg and a.inv != b.inv


def test_another_issuers_signature_does_not_finalize() -> None:
    pub = _issuer().public_key()
    other = blind_rsa.generate_key()
    blinded = blind_rsa.blind(pub, b"m")
    assert other.key_size == pub.key_size
    other_n = other.public_key().public_numbers().n  # the blinded message may lie above the other modulus: reduce it
    as_other = (int.from_bytes(blinded.blinded_msg, "big") % other_n).to_bytes(len(blinded.blinded_msg), "big")
    forged = blind_rsa.blind_sign(other, as_other)
    with pytest.raises(BlindSignatureError, match="does not verify"):
        blind_rsa.finalize(pub, b"m", forged, blinded.inv)


def test_bad_inputs_are_refused_by_name() -> None:
    key = _issuer()
    k_len = key.key_size // 8
    with pytest.raises(BlindSignatureError, match="blinded_msg must be 256 bytes"):
        blind_rsa.blind_sign(key, b"\x01" * 10)
    with pytest.raises(BlindSignatureError, match="not below the modulus"):
        blind_rsa.blind_sign(key, b"\xff" * k_len)
    with pytest.raises(BlindSignatureError, match="must be 256 bytes"):
        blind_rsa.finalize(key.public_key(), b"m", b"\x01", b"\x01")
    with pytest.raises(BlindSignatureError, match="DER"):
        blind_rsa.load_public_key(b"not a key")
    small = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    with pytest.raises(BlindSignatureError, match="1024 bits"):
        blind_rsa.load_public_key(blind_rsa.public_key_der(small.public_key()))
    assert blind_rsa.load_public_key(blind_rsa.public_key_der(key.public_key())).public_numbers() == \
        key.public_key().public_numbers()
