"""A device identity for tests that build device requests by hand: signs like the SDK, every part can be bent."""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

import aiohttp

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from fa_common.b64 import b64e
from queries.envelope import (
    HDR_DEVICE,
    HDR_NONCE,
    HDR_PROTOCOL,
    HDR_SIGNATURE,
    HDR_TIMESTAMP,
    PROTOCOL_VERSION,
    device_id_for,
    signing_payload,
)


class SignedDevice:
    def __init__(self) -> None:
        self.key = Ed25519PrivateKey.generate()
        self.public = self.key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.device_id = device_id_for(self.public)

    def signed_headers(self, method: str, path_qs: str, body: bytes, device: bool = True, nonce: str | None = None,
                       ts: str | None = None) -> dict[str, str]:
        """The headers the SDK sends: protocol version, timestamp, nonce, signature and (unless registering) device id."""
        ts = ts or str(int(time.time()))
        nonce = nonce or secrets.token_urlsafe(16)
        h = {HDR_PROTOCOL: str(PROTOCOL_VERSION), HDR_TIMESTAMP: ts, HDR_NONCE: nonce,
             HDR_SIGNATURE: b64e(self.key.sign(signing_payload(method, path_qs, ts, nonce, body)))}
        if device:
            h[HDR_DEVICE] = self.device_id
        return h

    async def post_json(self, http: aiohttp.ClientSession, url: str, path: str, payload: Any,
                        sign: bool = True) -> tuple[int, Any]:
        """POST `payload` (JSON, or bytes as given) to a device route, signed as the SDK signs: (status, JSON answer)."""
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        headers = {"Content-Type": "application/json", HDR_PROTOCOL: str(PROTOCOL_VERSION)}
        if sign:
            headers |= self.signed_headers("POST", path, body, device=path != "/v1/device/register")
        async with http.post(url.rstrip("/") + path, data=body, headers=headers) as r:
            return r.status, await r.json()
