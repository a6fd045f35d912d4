"""In-process server fixtures: the real aiohttp app on a temporary, migrated SQLite file."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer

from analytics_server.app import create_app
from analytics_server.db.engine import migrate
from analytics_server.settings import Settings


@pytest.fixture
async def migrated_url(tmp_path: Path) -> str:
    url = f"sqlite+aiosqlite:///{tmp_path / 'fa.db'}"
    await asyncio.to_thread(migrate, url)
    return url


@pytest.fixture
async def app_server(migrated_url: str) -> AsyncIterator[TestServer]:
    settings = Settings(db_url=migrated_url, retry_after_s=0.5, cohort_formation_wait_s=0.3, checkin_max_wait_s=2)
    server = TestServer(create_app(settings))
    await server.start_server()
    yield server
    await server.close()
