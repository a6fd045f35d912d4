"""In-process server fixtures: the real aiohttp app on a temporary, migrated SQLite file."""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from analytics_server.app import create_app
from analytics_server.db.engine import migrate
from analytics_server.settings import Settings
from devstack.pg_local import worker_database
from devstack.processes import fresh_database

PG_URL = os.environ.get("FA_TEST_POSTGRES_URL")

TEST_SETTINGS: dict[str, Any] = {"retry_after_s": 0.5, "cohort_formation_wait_s": 0.3, "checkin_max_wait_s": 2,
                                 "spec_check_timeout_s": 60.0}
"""Short waits, so in-process fleets form cohorts and idle devices come back quickly; a spec check bound that a busy
machine cannot hit with the tests' specs (the 5 s default guards a server's CPU; tests of that bound set their own)."""


def fixed_issuer_keys() -> str:
    """FA_ISSUER_KEYS of the fixed test issuer key (tests/support/data): what the production profile, which needs an
    issuer, is given by tests whose devices do not register."""
    from secagg import blind_rsa
    from tests.support.vectors import issuer_test_key

    return base64.b64encode(blind_rsa.public_key_der(issuer_test_key().public_key())).decode()


@pytest.fixture(scope="session")
def migrated_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One SQLite file migrated to the head revision; tests get copies (running Alembic each time is slow)."""
    path = tmp_path_factory.mktemp("migrated") / "template.db"
    migrate(f"sqlite+aiosqlite:///{path}")
    return path


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)] if PG_URL else ["sqlite"])
def db_url(request: pytest.FixtureRequest, migrated_template: Path, tmp_path: Path) -> str:
    """A migrated database on SQLite (a copy of the template) and, with FA_TEST_POSTGRES_URL set
    (`make test-postgres`), a fresh one on PostgreSQL too: the test runs on each."""
    if request.param == "postgres" and PG_URL:
        url = worker_database(PG_URL)
        fresh_database(url)
        return url
    shutil.copyfile(migrated_template, tmp_path / "fa.db")
    return f"sqlite+aiosqlite:///{tmp_path / 'fa.db'}"


@pytest.fixture
async def migrated_url(migrated_template: Path, tmp_path: Path) -> str:
    path = tmp_path / "fa.db"
    shutil.copyfile(migrated_template, path)
    return f"sqlite+aiosqlite:///{path}"


@pytest.fixture
async def start_app_server(migrated_url: str) -> AsyncIterator[Callable[..., Awaitable[TestServer]]]:
    """`await start_app_server(**settings)`: the app on the migrated database with these settings over the
    test defaults; closed at the end of the test."""
    servers: list[TestServer] = []

    async def start(**overrides: Any) -> TestServer:
        if overrides.get("profile") == "production" and not (overrides.get("issuer_keys") or overrides.get("issuer_url")):
            overrides["issuer_keys"] = fixed_issuer_keys()
        server = TestServer(create_app(Settings(**{**TEST_SETTINGS, "db_url": migrated_url, **overrides})))
        await server.start_server()
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.close()


@pytest.fixture
async def app_server(start_app_server: Callable[..., Awaitable[TestServer]]) -> TestServer:
    return await start_app_server()
