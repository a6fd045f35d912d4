"""The objects one server process shares between its routes (stored on the aiohttp app as "state")."""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass, field

from aiohttp import web
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey

from analytics_server.auth import DeviceAuth
from analytics_server.cluster import ProcessIdentity
from analytics_server.db.store import Store
from analytics_server.metrics import Metrics
from analytics_server.orchestrator import Orchestrator
from analytics_server.pool import DevicePool
from analytics_server.settings import Settings
from fa_common.ratelimit import AddressRateLimiter


@dataclass
class AppState:
    settings: Settings
    store: Store
    auth: DeviceAuth
    pool: DevicePool
    metrics: Metrics
    orchestrator: Orchestrator
    executor: Executor
    process: ProcessIdentity
    register_limiter: AddressRateLimiter | None = None
    issuer_keys: dict[bytes, RSAPublicKey] = field(default_factory=dict)
    """token_key_id → the identity issuer's keys this server trusts (analytics_server.issuer_keys); empty: none."""


STATE = web.AppKey("state", AppState)
