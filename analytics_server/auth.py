"""Authentication: analyst bearer tokens (stored hashed) and signed device requests with replay protection.

Device requests carry `X-FA-Device`, `X-FA-Timestamp` (unix seconds), `X-FA-Nonce` (16–64 chars of
[A-Za-z0-9_-]) and `X-FA-Signature` (base64 Ed25519 over `queries.envelope.signing_payload`). A request is
accepted once: its (device, nonce) is remembered for the timestamp window. The in-memory nonce set is
authoritative; it is flushed to the `nonces` table in small batches and reloaded at startup, so replays
are refused across restarts too (up to the last unflushed batch, ≤ FLUSH_S seconds).
"""

from __future__ import annotations

import asyncio
import re
import time

from aiohttp import web
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from analytics_server.db.store import Store, TokenInfo
from analytics_server.errors import HttpError
from queries.envelope import HDR_DEVICE, HDR_NONCE, HDR_SIGNATURE, HDR_TIMESTAMP, b64d, signing_payload

NONCE_RE = re.compile(r"^[A-Za-z0-9_-]{16,64}$")
FLUSH_S = 0.5


async def require_token(request: web.Request, store: Store, roles: tuple[str, ...]) -> TokenInfo:
    header = request.headers.get("Authorization", "")
    if not header:
        raise HttpError(401, "missing Authorization header (expected 'Bearer <token>')")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise HttpError(401, "Authorization header must be 'Bearer <token>'")
    info = await store.lookup_token(token.strip())
    if info is None:
        raise HttpError(401, "unknown or revoked token")
    if info.role not in roles:
        raise HttpError(403, f"this endpoint needs role {' or '.join(roles)}; the token has role {info.role}")
    return info


class DeviceAuth:
    def __init__(self, store: Store, window_s: float) -> None:
        self.store = store
        self.window = window_s
        self._keys: dict[str, Ed25519PublicKey] = {}
        self._nonces: dict[str, float] = {}
        self._unflushed: list[tuple[str, float]] = []
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._nonces = await self.store.recent_nonces(time.time() - self.window)
        self._task = asyncio.create_task(self._flusher())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        await self.flush()

    async def flush(self) -> None:
        items, self._unflushed = self._unflushed, []
        cutoff = time.time() - self.window
        await self.store.save_nonces(items, cutoff)
        if len(self._nonces) > 10_000:
            self._nonces = {k: t for k, t in self._nonces.items() if t >= cutoff}

    async def _flusher(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_S)
            if self._unflushed:
                await self.flush()

    def check_signature(self, key: Ed25519PublicKey, request: web.Request, body: bytes) -> tuple[str, str]:
        """Verify timestamp and signature of `request` under `key`; returns (timestamp, nonce)."""
        ts = request.headers.get(HDR_TIMESTAMP)
        nonce = request.headers.get(HDR_NONCE)
        sig = request.headers.get(HDR_SIGNATURE)
        missing = [h for h, v in ((HDR_TIMESTAMP, ts), (HDR_NONCE, nonce), (HDR_SIGNATURE, sig)) if not v]
        if missing:
            raise HttpError(401, f"unsigned device request: missing header(s) {', '.join(missing)}")
        assert ts is not None and nonce is not None and sig is not None
        try:
            when = float(ts)
        except ValueError:
            raise HttpError(401, f"{HDR_TIMESTAMP}: not a number") from None
        if not abs(time.time() - when) <= self.window:
            raise HttpError(401, f"{HDR_TIMESTAMP}: outside the accepted window of ±{self.window:.0f} s")
        if not NONCE_RE.match(nonce):
            raise HttpError(401, f"{HDR_NONCE}: must be 16-64 characters of [A-Za-z0-9_-]")
        try:
            raw_sig = b64d(sig, HDR_SIGNATURE, 64)
        except ValueError as exc:
            raise HttpError(401, str(exc)) from None
        try:
            key.verify(raw_sig, signing_payload(request.method, request.path_qs, ts, nonce, body))
        except InvalidSignature:
            raise HttpError(401, f"{HDR_SIGNATURE}: signature does not verify for this request") from None
        return ts, nonce

    def remember_nonce(self, device_id: str, nonce: str) -> None:
        key = f"{device_id}:{nonce}"
        if key in self._nonces:
            raise HttpError(401, f"{HDR_NONCE}: replayed request (nonce already used)")
        t = time.time()
        self._nonces[key] = t
        self._unflushed.append((key, t))

    async def verify(self, request: web.Request, body: bytes) -> str:
        """Authenticate a signed request from a registered device; returns its device id."""
        device_id = request.headers.get(HDR_DEVICE)
        if not device_id:
            raise HttpError(401, f"unsigned device request: missing header {HDR_DEVICE}")
        key = self._keys.get(device_id)
        if key is None:
            if len(device_id) > 64:
                raise HttpError(401, f"{HDR_DEVICE}: unknown device")
            raw = await self.store.device_key(device_id)
            if raw is None:
                raise HttpError(401, f"{HDR_DEVICE}: unknown device {device_id!r} (register first)")
            key = self._keys[device_id] = Ed25519PublicKey.from_public_bytes(raw)
        _, nonce = self.check_signature(key, request, body)
        self.remember_nonce(device_id, nonce)
        return device_id

    def public_key(self, device_id: str) -> bytes | None:
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

        key = self._keys.get(device_id)
        return None if key is None else key.public_bytes(Encoding.Raw, PublicFormat.Raw)
