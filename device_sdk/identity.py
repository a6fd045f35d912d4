"""Enrolment: obtaining the identity issuer's token for this device's identity key (docs/identities.md).

The app gives the client an `Enrolment`: the issuer's URL and the enrolment credential its own backend signed
for this install. Before registering, the client blinds a token request for its identity key (secagg.identity_token),
sends it with the credential to `POST {issuer}/v1/issuer/token`, unblinds the answer and checks it. The issuer never
sees the token it signed, so neither it nor the server can link the device's identity to its install.
The token is kept in the local store: one enrolment per identity, across restarts.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import aiohttp
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey

from secagg import identity_token
from secagg.blind_rsa import BlindSignatureError, load_public_key
from secagg.randomness import RandomSource

TOKEN_META = "identity_token"
MAX_CREDENTIAL_CHARS = 2048


class EnrolmentError(Exception):
    """The issuer refused or could not be used; `status` is its HTTP status (0: no answer or a bad one),
    `retry_after` its Retry-After in seconds when it gave one (a spent quota)."""

    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"identity issuer: HTTP {status}: {message}" if status else f"identity issuer: {message}")
        self.status = status
        self.message = message
        self.retry_after = retry_after


@dataclass(frozen=True)
class Enrolment:
    """Where and with what the device obtains its identity token: `issuer_url` (`fa-issuer serve`) and the
    `credential` the app's backend signed for this install."""

    issuer_url: str
    credential: str

    def __post_init__(self) -> None:
        if not isinstance(self.issuer_url, str) or not self.issuer_url.startswith(("http://", "https://")):
            raise ValueError(f"enrolment.issuer_url: an http(s) URL, got {self.issuer_url!r}")
        if not isinstance(self.credential, str) or not 0 < len(self.credential) <= MAX_CREDENTIAL_CHARS:
            raise ValueError(f"enrolment.credential: a non-empty string of at most {MAX_CREDENTIAL_CHARS} characters")


async def _answer(resp: aiohttp.ClientResponse) -> Any:
    try:
        return await resp.json(content_type=None)
    except ValueError:
        return None


def _message(body: Any, resp: aiohttp.ClientResponse) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    return error[:500] if isinstance(error, str) else (resp.reason or "no message")


async def issuer_key(http: aiohttp.ClientSession, enrolment: Enrolment, timeout: aiohttp.ClientTimeout) -> RSAPublicKey:
    """The first key the issuer lists (for a device that pins none; tokens under it then verify only for peers
    that trust it)."""
    async with http.get(enrolment.issuer_url.rstrip("/") + "/v1/issuer/keys", timeout=timeout) as resp:
        body = await _answer(resp)
        if resp.status != 200:
            raise EnrolmentError(resp.status, _message(body, resp))
    try:
        return load_public_key(base64.b64decode(body["keys"][0]["public_key"], validate=True))
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise EnrolmentError(0, f"GET /v1/issuer/keys: no usable key in the answer ({exc})") from None


async def obtain_token(http: aiohttp.ClientSession, enrolment: Enrolment, key: RSAPublicKey, identity_key: bytes,
                       randomness: RandomSource, timeout: aiohttp.ClientTimeout) -> bytes:
    """A token from the issuer for `identity_key` under `key`, checked before it is returned."""
    pending = identity_token.request(key, identity_key, randomness)
    payload = {"credential": enrolment.credential, "token_key_id": base64.b64encode(pending.token_key_id).decode(),
               "blinded_msg": base64.b64encode(pending.blinded_msg).decode()}
    async with http.post(enrolment.issuer_url.rstrip("/") + "/v1/issuer/token", json=payload, timeout=timeout) as resp:
        body = await _answer(resp)
        if resp.status != 200:
            retry = resp.headers.get("Retry-After")
            raise EnrolmentError(resp.status, _message(body, resp),
                                 float(retry) if retry and retry.isdigit() else None)
    try:
        blind_sig = base64.b64decode(body["blind_sig"], validate=True)
        return pending.finalize(blind_sig).encode()
    except (KeyError, TypeError, ValueError, BlindSignatureError) as exc:
        raise EnrolmentError(0, f"the issuer's answer is not a valid token: {exc}") from None
