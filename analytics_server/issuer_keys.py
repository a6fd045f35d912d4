"""The identity issuer's public keys this server trusts (docs/identities.md), from settings and/or the issuer.

`FA_ISSUER_KEYS` lists base64 SubjectPublicKeyInfo DER keys; `FA_ISSUER_URL` names a running `fa-issuer`, whose
`GET /v1/issuer/keys` is read once at start, waiting up to 15 s for an issuer started beside it (a server that
cannot read them does not start: it would otherwise admit devices it should refuse, or refuse every device). The
server holds public keys only: it can check tokens, never make them.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging

import aiohttp
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey

from analytics_server.settings import Settings
from secagg import identity_token
from secagg.blind_rsa import BlindSignatureError, load_public_key

log = logging.getLogger(__name__)
FETCH_TIMEOUT_S = 15.0
RETRY_S = 0.5
MAX_KEYS = 16


class IssuerKeysError(ValueError):
    """Issuer keys that cannot be used: the message names the setting or the issuer's answer."""


def parse_keys(text: str, what: str = "FA_ISSUER_KEYS") -> list[RSAPublicKey]:
    """The keys of a comma-separated list of base64 SPKI DER (empty: none)."""
    out = []
    for i, item in enumerate(p.strip() for p in text.split(",")):
        if not item:
            continue
        try:
            out.append(load_public_key(base64.b64decode(item, validate=True)))
        except (binascii.Error, ValueError, BlindSignatureError) as exc:
            raise IssuerKeysError(f"{what}[{i}]: not an issuer key ({exc})") from None
    if len(out) > MAX_KEYS:
        raise IssuerKeysError(f"{what}: at most {MAX_KEYS} keys")
    return out


async def fetch_keys(url: str, wait_s: float | None = None) -> list[RSAPublicKey]:
    """The keys `fa-issuer` at `url` signs with now. An issuer that is not (yet) listening is tried again for up to
    `wait_s` (both are often started together); an answer that is not the keys fails at once."""
    target = url.rstrip("/") + "/v1/issuer/keys"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + (FETCH_TIMEOUT_S if wait_s is None else wait_s)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=FETCH_TIMEOUT_S)) as http:
        while True:
            try:
                async with http.get(target) as resp:
                    if resp.status != 200:
                        raise IssuerKeysError(f"FA_ISSUER_URL: {target} answered HTTP {resp.status}")
                    body = await resp.json(content_type=None)
                break
            except aiohttp.ClientConnectionError as exc:
                if loop.time() + RETRY_S > deadline:
                    raise IssuerKeysError(f"FA_ISSUER_URL: cannot read {target}: {exc}") from None
                log.info("the identity issuer at %s is not answering yet (%s); trying again", url, exc)
                await asyncio.sleep(RETRY_S)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                raise IssuerKeysError(f"FA_ISSUER_URL: cannot read {target}: {exc}") from None
    keys = body.get("keys") if isinstance(body, dict) else None
    if not isinstance(keys, list) or not all(isinstance(k, dict) and isinstance(k.get("public_key"), str) for k in keys):
        raise IssuerKeysError(f"FA_ISSUER_URL: {target} did not answer {{\"keys\": [{{\"public_key\": …}}]}}")
    return parse_keys(",".join(k["public_key"] for k in keys), f"{target} keys")


async def trusted_keys(keys_setting: str, url: str | None) -> dict[bytes, RSAPublicKey]:
    """token_key_id → key for every key configured or published by the issuer; empty: no issuer."""
    keys = parse_keys(keys_setting)
    if url:
        keys += await fetch_keys(url)
    return identity_token.trusted_keys(keys)


async def for_settings(settings: Settings) -> dict[bytes, RSAPublicKey]:
    """The keys a server with `settings` trusts (empty: open registration, demo profile only); IssuerKeysError when
    it must not start (production without an issuer, or an issuer configured that lists no keys)."""
    problem = settings.identity_setup_error()
    if problem:
        raise IssuerKeysError(problem)
    keys = await trusted_keys(settings.issuer_keys, settings.issuer_url)
    if not keys and settings.has_issuer():
        raise IssuerKeysError("the identity issuer lists no keys: no device could register")
    return keys
