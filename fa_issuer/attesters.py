"""Who may get an identity token: the `Attester` interface, the reference app-backend attester, and the
platform-attestation adapter points (docs/identities.md, docs/issuer.md).

An attester turns an enrolment credential into an `Admission` (the app and the install it vouches for, the
unit the quota counts) or raises `CredentialRefused` saying why. The reference `AppBackendAttester` checks a
credential the app's own backend signed for one install:

    credential = base64url(payload) "." base64url(Ed25519 signature over DOMAIN ‖ payload)
    payload    = RFC 8785 canonical JSON {"app": str, "install": str, "not_after": unix seconds}

base64url is written without padding (padding is accepted). The issuer holds each app backend's public key;
the app backend side is `mint_credential` (used by fa-sim, tests and `fa-issuer credential`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import nacl.exceptions
from nacl.signing import SigningKey, VerifyKey

from fa_common.b64 import b64url_d, b64url_e
from fa_common.canonical import NotCanonical, canonical_json
from secagg.randomness import OsRandom, RandomSource

DOMAIN = b"fa-enrolment/v1"
MAX_CREDENTIAL_CHARS = 1024
"""A credential longer than this is refused before it is decoded (a real one is about 200 characters)."""
MAX_INSTALL_CHARS = 128
MAX_APP_CHARS = 64
SIGNATURE_BYTES = 64
SEED_BYTES = 32
MAX_NOT_AFTER = 2**53 - 1


class CredentialRefused(Exception):
    """The credential does not admit anyone; `reason` says why (sent to the device with 403)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Admission:
    """Who a credential admits: the quota is charged to (app, install)."""

    app: str
    install: str


class Attester(Protocol):
    """Checks an enrolment credential at time `now` (unix seconds)."""

    def admit(self, credential: str, now: float) -> Admission:
        """The admission the credential grants, or CredentialRefused(reason)."""
        ...


class PlayIntegrityAttester(Attester, Protocol):
    """Adapter point for Android's Play Integrity API (not implemented here: an interface, not a fake).

    The credential would be an integrity token the app requested with a nonce derived from its token request
    (e.g. SHA-256 of `blinded_msg`, so that a verdict cannot be replayed for another request). A real adapter
    must: decrypt and verify the token with Google's server-side API (or the app's own keys for local
    decryption); check `requestDetails.requestPackageName` against the configured app and the nonce against the
    request; require `appIntegrity.appRecognitionVerdict == PLAY_RECOGNIZED` with the configured certificate
    digest, `deviceIntegrity.deviceRecognitionVerdict` containing `MEETS_DEVICE_INTEGRITY`, and a
    `requestDetails.timestampMillis` within a few minutes of `now`; and derive the install from a stable
    identifier the verdict carries (or the app's account binding), since the quota is charged per install.
    """


class AppAttestAttester(Attester, Protocol):
    """Adapter point for Apple's App Attest (DeviceCheck) (not implemented here: an interface, not a fake).

    The credential would be an attestation (first time) or an assertion (later) over a client-data hash that
    covers the token request. A real adapter must: verify the attestation's certificate chain to Apple's App
    Attest root CA, the nonce (SHA-256 of authenticatorData ‖ clientDataHash) in the leaf certificate, the RP ID
    hash against the configured team id + bundle id, `aaguid` (production vs development) and a counter of 0;
    store the attested public key per key id; then for each assertion check the signature with that key, the RP
    ID hash and a strictly increasing counter. The install is the attested key id.
    """


def _b64url_decode(text: str, what: str) -> bytes:
    """Strict base64url (padding optional) → bytes; CredentialRefused naming `what` otherwise."""
    try:
        return b64url_d(text, what)
    except ValueError:
        raise CredentialRefused(f"malformed credential: the {what} is not base64url") from None


def payload_bytes(app: str, install: str, not_after: int) -> bytes:
    """The canonical payload an app backend signs; ValueError for values a credential cannot carry."""
    check_names(app, install, ValueError)
    if isinstance(not_after, bool) or not isinstance(not_after, int) or not 0 <= not_after <= MAX_NOT_AFTER:
        raise ValueError("not_after: must be an integer of unix seconds")
    return canonical_json({"app": app, "install": install, "not_after": not_after}, "credential")


def check_names(app: Any, install: Any, error: Callable[[str], Exception]) -> None:
    """`error(message)` raised when `app` or `install` is not a bounded printable string."""
    if not isinstance(app, str) or not 1 <= len(app) <= MAX_APP_CHARS or not app.isprintable():
        raise error(f"app: must be a string of 1-{MAX_APP_CHARS} printable characters")
    if not isinstance(install, str) or not 1 <= len(install) <= MAX_INSTALL_CHARS or not install.isprintable():
        raise error(f"install: must be a string of 1-{MAX_INSTALL_CHARS} printable characters")


def mint_credential(signing_key: SigningKey, app: str, install: str, not_after: int) -> str:
    """The app backend's side: a credential for `install` of `app`, valid until `not_after` (unix seconds)."""
    payload = payload_bytes(app, install, not_after)
    signature = signing_key.sign(DOMAIN + payload).signature
    return f"{b64url_e(payload)}.{b64url_e(signature)}"


def new_app_key(randomness: RandomSource | None = None) -> SigningKey:
    """A new app backend signing key (its 32-byte seed drawn from `randomness`)."""
    return SigningKey((randomness or OsRandom()).bytes(SEED_BYTES))


class AppBackendAttester:
    """The reference attester: credentials signed by a configured app backend's Ed25519 key."""

    def __init__(self, app_keys: Mapping[str, bytes]) -> None:
        self._keys = {app: VerifyKey(key) for app, key in app_keys.items()}

    @property
    def apps(self) -> list[str]:
        return sorted(self._keys)

    def admit(self, credential: str, now: float) -> Admission:
        if not isinstance(credential, str) or not credential:
            raise CredentialRefused("malformed credential: expected a non-empty string")
        if len(credential) > MAX_CREDENTIAL_CHARS:
            raise CredentialRefused(f"malformed credential: longer than {MAX_CREDENTIAL_CHARS} characters")
        payload_part, dot, sig_part = credential.partition(".")
        if not dot or "." in sig_part:
            raise CredentialRefused("malformed credential: expected base64url(payload).base64url(signature)")
        payload = _b64url_decode(payload_part, "payload")
        signature = _b64url_decode(sig_part, "signature")
        if len(signature) != SIGNATURE_BYTES:
            raise CredentialRefused(f"malformed credential: the signature is {len(signature)} bytes, not {SIGNATURE_BYTES}")
        fields = _parse_payload(payload)
        key = self._keys.get(fields["app"])
        if key is None:
            raise CredentialRefused(f"unknown app {fields['app'][:MAX_APP_CHARS]!r}: no app backend key is configured for it")
        try:
            key.verify(DOMAIN + payload, signature)
        except (nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError, ValueError):
            raise CredentialRefused(f"bad signature: the credential is not signed by app {fields['app']!r}'s backend key") from None
        if fields["not_after"] < now:
            raise CredentialRefused(f"expired: the credential was valid until {fields['not_after']} (unix seconds)")
        return Admission(fields["app"], fields["install"])


def _parse_payload(payload: bytes) -> dict[str, Any]:
    try:
        fields = json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise CredentialRefused("malformed credential: the payload is not JSON") from None
    if not isinstance(fields, dict) or set(fields) != {"app", "install", "not_after"}:
        raise CredentialRefused("malformed credential: the payload must hold exactly app, install and not_after")
    check_names(fields["app"], fields["install"], _malformed)
    not_after = fields["not_after"]
    if isinstance(not_after, bool) or not isinstance(not_after, int) or not 0 <= not_after <= MAX_NOT_AFTER:
        raise CredentialRefused("malformed credential: not_after must be an integer of unix seconds")
    try:
        canonical = canonical_json(fields, "credential")
    except NotCanonical:
        canonical = b""
    if canonical != payload:
        raise CredentialRefused("malformed credential: the payload is not canonical JSON (RFC 8785)")
    return fields


def _malformed(message: str) -> CredentialRefused:
    return CredentialRefused(f"malformed credential: {message}")
