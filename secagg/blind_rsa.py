"""RSA blind signatures, RSABSSA-SHA384-PSS-Deterministic (Denis, Jacobs and Wood, "RSA Blind Signatures",
RFC 9474), the scheme behind Privacy Pass's publicly verifiable tokens (RFC 9578, token type 2).

A client blinds a message for the issuer's public key; the issuer signs the blinded message without seeing the
message; the client unblinds the result into an ordinary RSASSA-PSS signature (SHA-384, MGF1-SHA-384, 48-byte
salt) that anyone verifies with the public key, and that the issuer cannot link to the signing request.

No maintained Python package implements RFC 9474, so this module holds its three client/issuer steps over
`cryptography`'s RSA keys: key generation, and every verification (`finalize` checks the unblinded signature and
`verify` is `cryptography`'s RSASSA-PSS verification). What is written here is the blinding arithmetic and
EMSA-PSS encoding (RFC 8017 §9.1.1), checked against RFC 9474's test vectors (tests/secagg/test_blind_rsa.py)
and against `@cloudflare/blindrsa-ts` in the JS SDK's tests.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from secagg.errors import SecAggError
from secagg.randomness import OsRandom, RandomSource

HASH_LEN = 48
SALT_LEN = 48
MODULUS_BITS = 2048
PUBLIC_EXPONENT = 65537
_PSS = padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=SALT_LEN)


class BlindSignatureError(SecAggError):
    """A blind-signature step that must not go on: bad lengths, a message or signature that does not verify."""


@dataclass(frozen=True)
class Blinded:
    """What `blind` returns: the message to send to the issuer and the inverse to keep for `finalize`."""

    blinded_msg: bytes
    inv: bytes


def generate_key(modulus_bits: int = MODULUS_BITS) -> rsa.RSAPrivateKey:
    """A new issuer key (`cryptography` draws its primes from the OS)."""
    return rsa.generate_private_key(public_exponent=PUBLIC_EXPONENT, key_size=modulus_bits)


def public_key_der(key: rsa.RSAPublicKey) -> bytes:
    """The SubjectPublicKeyInfo encoding that tokens name by hash (RFC 9578 `token_key_id`)."""
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def load_public_key(der: bytes) -> rsa.RSAPublicKey:
    """An RSA public key from its SubjectPublicKeyInfo DER; anything else raises BlindSignatureError."""
    try:
        key = serialization.load_der_public_key(der)
    except ValueError as exc:
        raise BlindSignatureError(f"not a DER SubjectPublicKeyInfo: {exc}") from None
    if not isinstance(key, rsa.RSAPublicKey):
        raise BlindSignatureError("the issuer key is not an RSA key")
    if key.key_size < MODULUS_BITS:
        raise BlindSignatureError(f"the issuer key has {key.key_size} bits; at least {MODULUS_BITS} are required")
    return key


def _modulus_len(key: rsa.RSAPublicKey) -> int:
    return (key.key_size + 7) // 8


def _mgf1(seed: bytes, length: int) -> bytes:
    out = bytearray()
    counter = 0
    while len(out) < length:
        out += hashlib.sha384(seed + counter.to_bytes(4, "big")).digest()
        counter += 1
    return bytes(out[:length])


def emsa_pss_encode(msg: bytes, em_bits: int, salt: bytes) -> bytes:
    """EMSA-PSS-ENCODE (RFC 8017 §9.1.1) with SHA-384 and MGF1-SHA-384."""
    em_len = (em_bits + 7) // 8
    if em_len < HASH_LEN + len(salt) + 2:
        raise BlindSignatureError("modulus too small for the encoding")
    m_hash = hashlib.sha384(msg).digest()
    h = hashlib.sha384(bytes(8) + m_hash + salt).digest()
    db = bytes(em_len - len(salt) - HASH_LEN - 2) + b"\x01" + salt
    masked = bytearray(a ^ b for a, b in zip(db, _mgf1(h, em_len - HASH_LEN - 1)))
    masked[0] &= 0xFF >> (8 * em_len - em_bits)
    return bytes(masked) + h + b"\xbc"


def blind(key: rsa.RSAPublicKey, msg: bytes, randomness: RandomSource | None = None, *,
          salt: bytes | None = None, r: int | None = None) -> Blinded:
    """RFC 9474 §4.2 Blind. `salt` and `r` are for known-answer tests only; by default both are drawn."""
    rand = randomness or OsRandom()
    n, e = key.public_numbers().n, key.public_numbers().e
    k_len = _modulus_len(key)
    encoded = emsa_pss_encode(msg, key.key_size - 1, rand.bytes(SALT_LEN) if salt is None else salt)
    m = int.from_bytes(encoded, "big")
    if math.gcd(m, n) != 1:
        raise BlindSignatureError("invalid input: the encoded message shares a factor with the modulus")
    while True:
        r_val = rand.randbelow(n - 1) + 1 if r is None else r
        if math.gcd(r_val, n) == 1:
            break
        if r is not None:
            raise BlindSignatureError("the blind is not invertible")
    z = (m * pow(r_val, e, n)) % n
    return Blinded(z.to_bytes(k_len, "big"), pow(r_val, -1, n).to_bytes(k_len, "big"))


def blind_sign(key: rsa.RSAPrivateKey, blinded_msg: bytes) -> bytes:
    """RFC 9474 §4.3 BlindSign (CRT exponentiation, then the RSAVP1 check against fault attacks)."""
    numbers = key.private_numbers()
    pub = numbers.public_numbers
    k_len = _modulus_len(key.public_key())
    if len(blinded_msg) != k_len:
        raise BlindSignatureError(f"blinded_msg must be {k_len} bytes, got {len(blinded_msg)}")
    m = int.from_bytes(blinded_msg, "big")
    if m >= pub.n:
        raise BlindSignatureError("blinded_msg is not below the modulus")
    s1, s2 = pow(m, numbers.dmp1, numbers.p), pow(m, numbers.dmq1, numbers.q)
    s = s2 + numbers.q * ((numbers.iqmp * (s1 - s2)) % numbers.p)
    if pow(s, pub.e, pub.n) != m:
        raise BlindSignatureError("signing failure")
    return s.to_bytes(k_len, "big")


def finalize(key: rsa.RSAPublicKey, msg: bytes, blind_sig: bytes, inv: bytes) -> bytes:
    """RFC 9474 §4.4 Finalize: the unblinded signature, verified before it is returned."""
    n = key.public_numbers().n
    k_len = _modulus_len(key)
    if len(blind_sig) != k_len or len(inv) != k_len:
        raise BlindSignatureError(f"blind_sig and inv must be {k_len} bytes")
    sig = ((int.from_bytes(blind_sig, "big") * int.from_bytes(inv, "big")) % n).to_bytes(k_len, "big")
    if not verify(key, msg, sig):
        raise BlindSignatureError("the issuer's blind signature does not verify")
    return sig


def verify(key: rsa.RSAPublicKey, msg: bytes, sig: bytes) -> bool:
    """RSASSA-PSS-VERIFY with SHA-384, MGF1-SHA-384 and a 48-byte salt (by `cryptography`)."""
    if len(sig) != _modulus_len(key):
        return False
    try:
        key.verify(sig, msg, _PSS, hashes.SHA384())
    except InvalidSignature:
        return False
    return True
