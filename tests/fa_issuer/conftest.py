"""Shared fixtures of the issuer's tests: one RSA issuer key per session (generating one takes a while), an app
backend key, and an in-process issuer behind aiohttp's test server."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from nacl.signing import SigningKey

from fa_common.ratelimit import AddressRateLimiter
from fa_issuer.app import Issuer, create_app
from fa_issuer.attesters import AppBackendAttester, mint_credential, new_app_key
from fa_issuer.keys import IssuerKey
from fa_issuer.quota import QuotaStore
from secagg import blind_rsa
from secagg.randomness import SeededRandom

APP = "notes"


@pytest.fixture(scope="session")
def issuer_key() -> IssuerKey:
    return IssuerKey.of(blind_rsa.generate_key())


@pytest.fixture(scope="session")
def app_key() -> SigningKey:
    return new_app_key(SeededRandom(b"tests/fa_issuer app backend"))


def credential(key: SigningKey, install: str, valid_s: float = 3600, app: str = APP) -> str:
    return mint_credential(key, app, install, int(time.time() + valid_s))


IssuerFactory = Callable[..., Awaitable[tuple[TestClient[Any, Any], Issuer]]]


@pytest.fixture
async def start_issuer(tmp_path: Path, issuer_key: IssuerKey, app_key: SigningKey) -> AsyncIterator[IssuerFactory]:
    """`await start_issuer(tokens_per_day=1, limiter=None)` → (client, issuer) of a fresh in-process service."""
    clients: list[TestClient[Any, Any]] = []

    async def start(tokens_per_day: int = 1, limiter: AddressRateLimiter | None = None) -> tuple[TestClient[Any, Any], Issuer]:
        quota = QuotaStore(tmp_path / f"issuer-{len(clients)}.db", tokens_per_day)
        issuer = Issuer.with_key(issuer_key, AppBackendAttester({APP: bytes(app_key.verify_key)}), quota, limiter)
        client: TestClient[Any, Any] = TestClient(TestServer(create_app(issuer)))
        await client.start_server()
        clients.append(client)
        return client, issuer

    yield start
    for client in clients:
        await client.close()
