"""Identity tokens: an issuer's unlinkable vouching for one device identity key (docs/identities.md).

The token is a Privacy Pass token of type 2 (publicly verifiable, blind RSA; Celi, Davidson, Valdez and Wood,
"Privacy Pass Issuance Protocols", RFC 9578, and the token structure of Pauly, Valdez and Wood, "The Privacy
Pass HTTP Authentication Scheme", RFC 9577 §2.2) whose challenge is the device's Ed25519 identity key:

    token_input = token_type (2 bytes, 0x0002) ‖ nonce (32) ‖ challenge_digest (32) ‖ token_key_id (32)
    challenge_digest = SHA-256(CHALLENGE_DOMAIN ‖ identity public key)
    token_key_id = SHA-256(the issuer key's SubjectPublicKeyInfo DER)
    token = token_input ‖ authenticator (the RSABSSA-SHA384-PSS-Deterministic signature of token_input)

The device blinds token_input, the issuer signs it blind against an enrolment credential (and its quota), and
the device unblinds it. Anyone holding the issuer's public key checks that a token vouches for a given
identity key; the issuer cannot tell which of the tokens it signed that is, even together with the server.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric import rsa

from secagg import blind_rsa
from secagg.blind_rsa import BlindSignatureError
from secagg.randomness import OsRandom, RandomSource

TOKEN_TYPE = 0x0002
CHALLENGE_DOMAIN = b"fa-identity-token/v1/"
NONCE_BYTES = 32
KEY_ID_BYTES = 32
AUTHENTICATOR_BYTES = blind_rsa.MODULUS_BITS // 8
INPUT_BYTES = 2 + NONCE_BYTES + 32 + KEY_ID_BYTES
TOKEN_BYTES = INPUT_BYTES + AUTHENTICATOR_BYTES


class TokenError(BlindSignatureError):
    """A token that is malformed or does not vouch for the identity it is presented with."""


def key_id(key: rsa.RSAPublicKey) -> bytes:
    """The 32-byte id tokens carry for the issuer key that signed them."""
    return hashlib.sha256(blind_rsa.public_key_der(key)).digest()


def challenge_digest(identity_key: bytes) -> bytes:
    if len(identity_key) != 32:
        raise TokenError(f"an identity key is 32 bytes (Ed25519), got {len(identity_key)}")
    return hashlib.sha256(CHALLENGE_DOMAIN + identity_key).digest()


@dataclass(frozen=True)
class IdentityToken:
    nonce: bytes
    challenge: bytes
    token_key_id: bytes
    authenticator: bytes

    def token_input(self) -> bytes:
        return TOKEN_TYPE.to_bytes(2, "big") + self.nonce + self.challenge + self.token_key_id

    def encode(self) -> bytes:
        return self.token_input() + self.authenticator

    @classmethod
    def decode(cls, raw: bytes) -> IdentityToken:
        if len(raw) != TOKEN_BYTES:
            raise TokenError(f"an identity token is {TOKEN_BYTES} bytes, got {len(raw)}")
        if int.from_bytes(raw[:2], "big") != TOKEN_TYPE:
            raise TokenError(f"token_type must be {TOKEN_TYPE}, got {int.from_bytes(raw[:2], 'big')}")
        at = 2
        parts = []
        for size in (NONCE_BYTES, 32, KEY_ID_BYTES):
            parts.append(raw[at:at + size])
            at += size
        return cls(parts[0], parts[1], parts[2], raw[at:])


@dataclass(frozen=True)
class PendingToken:
    """The device's side of one issuance: what it sends (`blinded_msg`, `token_key_id`) and keeps."""

    unsigned: IdentityToken
    blinded_msg: bytes
    inv: bytes
    issuer_key: rsa.RSAPublicKey

    @property
    def token_key_id(self) -> bytes:
        return self.unsigned.token_key_id

    def finalize(self, blind_sig: bytes) -> IdentityToken:
        """The token, once the issuer's blind signature unblinds into a valid signature (else TokenError)."""
        try:
            sig = blind_rsa.finalize(self.issuer_key, self.unsigned.token_input(), blind_sig, self.inv)
        except BlindSignatureError as exc:
            raise TokenError(f"the issuer's answer is not a valid token: {exc}") from None
        return IdentityToken(self.unsigned.nonce, self.unsigned.challenge, self.unsigned.token_key_id, sig)


def request(issuer_key: rsa.RSAPublicKey, identity_key: bytes, randomness: RandomSource | None = None) -> PendingToken:
    """Start the issuance of a token for `identity_key` under `issuer_key`."""
    rand = randomness or OsRandom()
    unsigned = IdentityToken(rand.bytes(NONCE_BYTES), challenge_digest(identity_key), key_id(issuer_key), b"")
    blinded = blind_rsa.blind(issuer_key, unsigned.token_input(), rand)
    return PendingToken(unsigned, blinded.blinded_msg, blinded.inv, issuer_key)


def verify(raw: bytes, identity_key: bytes, issuer_keys: Mapping[bytes, rsa.RSAPublicKey]) -> IdentityToken:
    """The decoded token if it vouches for `identity_key` under one of `issuer_keys` (by token_key_id); else
    TokenError saying what is wrong."""
    token = IdentityToken.decode(raw)
    if not hmac.compare_digest(token.challenge, challenge_digest(identity_key)):
        raise TokenError("the token vouches for another identity key")
    key = issuer_keys.get(token.token_key_id)
    if key is None:
        raise TokenError("the token was signed by an issuer key this party does not trust")
    if not blind_rsa.verify(key, token.token_input(), token.authenticator):
        raise TokenError("the token's signature does not verify")
    return token


def trusted_keys(keys: list[rsa.RSAPublicKey]) -> dict[bytes, rsa.RSAPublicKey]:
    """`verify`'s key map for a list of pinned issuer public keys."""
    return {key_id(k): k for k in keys}
