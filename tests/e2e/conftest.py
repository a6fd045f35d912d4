"""Fixtures for end-to-end tests: a real server process per test on a fresh database.

`db_url` is parametrised: a temporary SQLite file always, and PostgreSQL when FA_TEST_POSTGRES_URL is set
(those cases carry the `postgres` marker; without the variable they are not generated at all).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Server, fresh_database

PG_URL = os.environ.get("FA_TEST_POSTGRES_URL")
collect_ignore = [] if PG_URL else ["test_cluster.py"]
"""Many processes need PostgreSQL: the cluster tests exist only under `make test-postgres`."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "db_url" in metafunc.fixturenames:
        params = [pytest.param("sqlite", id="sqlite")]
        if PG_URL:
            params.append(pytest.param("postgres", id="postgres", marks=pytest.mark.postgres))
        metafunc.parametrize("db_url", params, indirect=True)


@pytest.fixture
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    url = PG_URL if request.param == "postgres" else f"sqlite+aiosqlite:///{tmp_path / 'fa.db'}"
    assert url is not None
    fresh_database(url)
    return url


@pytest.fixture
def server(db_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Server]:
    """A server process on `db_url`; `@pytest.mark.server_env({...})` adds to its environment."""
    marker = request.node.get_closest_marker("server_env")
    srv = Server(db_url, tmp_path / "server.log", env=marker.args[0] if marker else None).start()
    yield srv
    srv.stop()
    assert not srv.log_has_tracebacks(), (tmp_path / "server.log").read_text()[-5000:]
