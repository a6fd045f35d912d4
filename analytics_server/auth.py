"""Authentication: analyst bearer tokens (stored hashed) and signed device requests with replay protection.

Device requests carry `X-FA-Device`, `X-FA-Timestamp` (unix seconds), `X-FA-Nonce` (16–64 chars of
[A-Za-z0-9_-]) and `X-FA-Signature` (base64 Ed25519 over `queries.envelope.signing_payload`, which covers
method, path and query, timestamp, nonce and the body's hash). A request is accepted only while
|now − timestamp| ≤ window, and only once:

- registration and check-ins *claim* their (device, nonce) in the database before they act: an INSERT
  under the `nonces` primary key, so a replay is refused by whichever server process sees it, also right
  after a crash. Claims arriving together are written in one transaction (group commit; each request
  still waits for its own row to be committed).
- phase messages and read-only long-polls (cohort status, the server's next phase message) are checked
  against a bounded in-process set only. A read-only request's signature binds method and path, so a
  captured one can only be replayed as itself, and it changes nothing: it returns the same
  public-to-the-device answer again. A phase message is idempotent by content (the cohort accepts the same
  bytes for the same party and phase once and answers every identical copy alike), and its cohort lives only
  in the memory of the process that runs it: a replay elsewhere gets 421, after a crash 404. A database
  claim would add nothing but a write per device and phase.

Each nonce is kept until max(received, timestamp) + window: after that no request carrying it can pass the
timestamp check, so pruning it cannot re-open a replay (pruning by receive time would, for a request
stamped in the future).

A refusal is a typed error of `fa_common.errors` (Unauthenticated, Forbidden, Unavailable); the HTTP edge answers it.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import OrderedDict
from dataclasses import dataclass

from aiohttp import web
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey
from sqlalchemy.exc import SQLAlchemyError

from analytics_server.db.batching import Batcher
from analytics_server.db.store import Store, TokenInfo
from fa_common.b64 import b64d
from fa_common.clock import SYSTEM_CLOCK, Clock
from fa_common.errors import Forbidden, Unauthenticated, Unavailable
from queries.envelope import HDR_DEVICE, HDR_NONCE, HDR_SIGNATURE, HDR_TIMESTAMP, signing_payload

log = logging.getLogger(__name__)
NONCE_RE = re.compile(r"^[A-Za-z0-9_-]{16,64}$")
PRUNE_EVERY_S = 60.0
"""How often expired nonces are deleted from the database."""
CLAIM_BATCH_MAX = 500
"""Most nonces written in one transaction."""
RECENT_MAX = 100_000
"""Most nonces of read-only requests remembered in memory (oldest forgotten first)."""


async def require_token(request: web.Request, store: Store, roles: tuple[str, ...]) -> TokenInfo:
    header = request.headers.get("Authorization", "")
    if not header:
        raise Unauthenticated("missing Authorization header (expected 'Bearer <token>')")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("Authorization header must be 'Bearer <token>'")
    if len(token) > 200:
        raise Unauthenticated("unknown or revoked token")
    info = await store.tokens.lookup(token.strip())
    if info is None:
        raise Unauthenticated("unknown or revoked token")
    if info.role not in roles:
        raise Forbidden(f"this endpoint needs role {' or '.join(roles)}; the token has role {info.role}")
    return info


@dataclass(frozen=True)
class SignedHeaders:
    """The signing headers of one device request, checked for presence, form and timestamp window."""

    timestamp: str
    when: float
    nonce: str
    signature: bytes


@dataclass(frozen=True)
class DeviceRequest:
    """A device request whose headers passed every check that needs no body (device known, timestamp in
    the window); its signature is verified once the (bounded) body has been read."""

    device_id: str
    key: VerifyKey
    headers: SignedHeaders


class NonceLedger:
    """Claims (device, nonce) pairs in the database; concurrent claims share one transaction."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._writer: Batcher[tuple[str, str, float], bool] = Batcher(self._claim_batch, CLAIM_BATCH_MAX)

    async def claim(self, device_id: str, nonce: str, expires_at: float) -> bool:
        """True once the pair is committed as new; False when it was already stored (a replay)."""
        return await self._writer.submit((device_id, nonce, expires_at))

    async def _claim_batch(self, batch: list[tuple[str, str, float]]) -> list[bool]:
        rows: dict[tuple[str, str], tuple[str, str, float]] = {}
        for row in batch:
            rows.setdefault((row[0], row[1]), row)
        fresh = await self.store.devices.claim_nonces(list(rows.values()))
        out = []
        for d, n, _ in batch:
            out.append((d, n) in fresh)
            fresh.discard((d, n))  # a second claim of the same pair in this batch is a replay
        return out

    async def wait_idle(self) -> None:
        await self._writer.wait_idle()


class RecentNonces:
    """Bounded in-process memory of read-only requests' nonces (never the source of truth)."""

    def __init__(self, max_entries: int = RECENT_MAX) -> None:
        self.max_entries = max_entries
        self._items: OrderedDict[tuple[str, str], float] = OrderedDict()

    def add(self, device_id: str, nonce: str, expires_at: float, now: float) -> bool:
        """False if the pair is remembered and unexpired (a replay); otherwise remember it."""
        key = (device_id, nonce)
        known = self._items.get(key)
        if known is not None and known >= now:
            return False
        self._items[key] = expires_at
        while self._items:
            oldest, exp = next(iter(self._items.items()))
            if exp >= now and len(self._items) <= self.max_entries:
                break
            del self._items[oldest]
        return True

    def __len__(self) -> int:
        return len(self._items)


class DeviceAuth:
    def __init__(self, store: Store, window_s: float, clock: Clock | None = None, require_token: bool = False) -> None:
        """`require_token`: only devices registered with an issuer's identity token are known (docs/identities.md)."""
        self.store = store
        self.require_token = require_token
        self.window = window_s
        self.clock: Clock = clock or SYSTEM_CLOCK  # the signature window and nonce expiry
        self._keys: dict[str, VerifyKey] = {}
        self.ledger = NonceLedger(store)
        self.recent = RecentNonces()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._pruner())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.ledger.wait_idle()

    async def _pruner(self) -> None:
        while True:
            try:
                await self.store.devices.prune_nonces(self.clock.time())
            except SQLAlchemyError as exc:
                log.warning("pruning expired nonces failed: %s", exc.__class__.__name__)
            await asyncio.sleep(PRUNE_EVERY_S)

    # -- checks that need no body ---------------------------------------------------------------

    def signed_headers(self, request: web.Request) -> SignedHeaders:
        """Presence and form of the signing headers, and the timestamp window (no body needed)."""
        ts = request.headers.get(HDR_TIMESTAMP)
        nonce = request.headers.get(HDR_NONCE)
        sig = request.headers.get(HDR_SIGNATURE)
        missing = [h for h, v in ((HDR_TIMESTAMP, ts), (HDR_NONCE, nonce), (HDR_SIGNATURE, sig)) if not v]
        if missing:
            raise Unauthenticated(f"unsigned device request: missing header(s) {', '.join(missing)}")
        assert ts is not None and nonce is not None and sig is not None
        try:
            when = float(ts)
        except ValueError:
            raise Unauthenticated(f"{HDR_TIMESTAMP}: not a number") from None
        if not abs(self.clock.time() - when) <= self.window:
            raise Unauthenticated(f"{HDR_TIMESTAMP}: outside the accepted window of ±{self.window:.0f} s")
        if not NONCE_RE.match(nonce):
            raise Unauthenticated(f"{HDR_NONCE}: must be 16-64 characters of [A-Za-z0-9_-]")
        try:
            raw_sig = b64d(sig, HDR_SIGNATURE, 64)
        except ValueError as exc:
            raise Unauthenticated(str(exc)) from None
        return SignedHeaders(ts, when, nonce, raw_sig)

    async def identify(self, request: web.Request) -> DeviceRequest:
        """Every check of a signed request from a registered device that can be made before its body is
        read: signing headers, timestamp window, device known."""
        device_id = request.headers.get(HDR_DEVICE)
        if not device_id:
            raise Unauthenticated(f"unsigned device request: missing header {HDR_DEVICE}")
        hdrs = self.signed_headers(request)
        key = self._keys.get(device_id)
        if key is None:
            if len(device_id) > 64:
                raise Unauthenticated(f"{HDR_DEVICE}: unknown device")
            raw, token = await self.store.devices.identity(device_id)
            if raw is None:
                raise Unauthenticated(f"{HDR_DEVICE}: unknown device {device_id!r} (register first)")
            if self.require_token and token is None:
                raise Forbidden(f"{HDR_DEVICE}: device {device_id!r} registered without an identity token; this "
                                "server admits only devices an issuer vouched for: register again with one")
            key = self._keys[device_id] = VerifyKey(raw)
        return DeviceRequest(device_id, key, hdrs)

    # -- checks after the body ------------------------------------------------------------------

    def check_signature(self, key: VerifyKey, request: web.Request, body: bytes,
                        hdrs: SignedHeaders | None = None) -> SignedHeaders:
        """Verify the signature of `request` (headers checked first unless given) under `key` (libsodium's
        Ed25519, which also refuses small-order keys and non-canonical signatures)."""
        hdrs = hdrs or self.signed_headers(request)
        try:
            key.verify(signing_payload(request.method, request.path_qs, hdrs.timestamp, hdrs.nonce, body), hdrs.signature)
        except BadSignatureError:
            raise Unauthenticated(f"{HDR_SIGNATURE}: signature does not verify for this request") from None
        return hdrs

    def expires_at(self, hdrs: SignedHeaders, now: float) -> float:
        return max(now, hdrs.when) + self.window

    async def claim(self, device_id: str, hdrs: SignedHeaders) -> None:
        """Record the nonce in the database before a state-changing request acts; Unauthenticated on a replay."""
        try:
            fresh = await self.ledger.claim(device_id, hdrs.nonce, self.expires_at(hdrs, self.clock.time()))
        except SQLAlchemyError as exc:
            log.warning("recording a nonce failed: %s", exc.__class__.__name__)
            raise Unavailable("could not record the request; retry later", retry_after_s=1) from None
        if not fresh:
            raise Unauthenticated(f"{HDR_NONCE}: replayed request (nonce already used)")

    def claim_read_only(self, device_id: str, hdrs: SignedHeaders) -> None:
        """In-process replay check for read-only requests (see the module docstring)."""
        now = self.clock.time()
        if not self.recent.add(device_id, hdrs.nonce, self.expires_at(hdrs, now), now):
            raise Unauthenticated(f"{HDR_NONCE}: replayed request (nonce already used)")

    async def verify(self, request: web.Request, body: bytes, *, read_only: bool = False) -> str:
        """Authenticate a signed request whose body was already read; returns the device id."""
        dev = await self.identify(request)
        self.check_signature(dev.key, request, body, dev.headers)
        if read_only:
            self.claim_read_only(dev.device_id, dev.headers)
        else:
            await self.claim(dev.device_id, dev.headers)
        return dev.device_id
