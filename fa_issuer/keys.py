"""The issuer's RSA key: created by `fa-issuer keygen` (a PEM file of mode 0600, never overwritten), loaded by
`serve`. The private key stays in this process; `/v1/issuer/keys` publishes its SubjectPublicKeyInfo and its
`token_key_id` (SHA-256 of that DER, RFC 9578)."""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from fa_common.keyfile import KeyFileError, write_private
from secagg import blind_rsa, identity_token


@dataclass(frozen=True)
class IssuerKey:
    private: rsa.RSAPrivateKey
    public: rsa.RSAPublicKey
    token_key_id: bytes
    public_der: bytes

    @classmethod
    def of(cls, private: rsa.RSAPrivateKey) -> IssuerKey:
        public = private.public_key()
        return cls(private, public, identity_token.key_id(public), blind_rsa.public_key_der(public))


def generate(path: Path) -> IssuerKey:
    """A new key written to `path` (PKCS#8 PEM, mode 0600, created exclusively: an existing file is an error)."""
    key = blind_rsa.generate_key()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    write_private(path, pem)
    return IssuerKey.of(key)


def load(path: Path) -> IssuerKey:
    """The key in `path`; KeyFileError when it is missing, readable by others or not a 2048-bit RSA key."""
    try:
        mode = path.stat().st_mode
        data = path.read_bytes()
    except OSError as exc:
        raise KeyFileError(f"cannot read the issuer key {path}: {exc.strerror} (create one with `fa-issuer keygen`)") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyFileError(f"the issuer key {path} is accessible to other users (mode {stat.S_IMODE(mode):o}); chmod 600 it")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"{path} is not an unencrypted PEM private key: {exc}") from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise KeyFileError(f"{path} does not hold an RSA key")
    if key.key_size != blind_rsa.MODULUS_BITS:  # identity tokens carry a 256-byte authenticator
        raise KeyFileError(f"{path}: the key has {key.key_size} bits; identity tokens need {blind_rsa.MODULUS_BITS}")
    return IssuerKey.of(key)
