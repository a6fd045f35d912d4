"""Fixtures for end-to-end tests: a real server process per test on a fresh database.

`db_url` is parametrised: a temporary SQLite file always, and PostgreSQL when FA_TEST_POSTGRES_URL is set
(those cases carry the `postgres` marker; without the variable they are not generated at all).

The tier runs on pytest-xdist workers a module at a time (`make test`: `--dist loadfile --no-loadscope-reorder`),
the longest modules first (`LONGEST_FIRST`), so that no long module starts last and runs on alone.

Every query submitted through `AnalystClient` gets cohort phase deadlines fitted to the machine as it is then
(`fitted_deadlines`, tests/support/deadlines.py): never shorter than the test wrote, longer when the machine is
too busy for the test's fleets to answer in time; the client's `wait` for that query stretches by the same factor.
A spec that does not name its validation mode gets phases long enough for its fleet to prove, or "none" when the
simulated fleet could not prove for a cohort in `FLEET_PROVING_CAP_S` (devstack/proving.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from analyst_client.client import AnalystClient
from devstack import proving
from devstack.pg_local import worker_database
from tests.e2e.harness import Server, fresh_database
from tests.support import deadlines

FLEET_PROVING_CAP_S = 20.0
"""A spec without a validation of its own keeps the server's default (proofs) while one fleet process proves for a
cohort within this; beyond it the test's fleet could not keep up, and the spec asks for "none"
(devstack/proving.py). The validation tests name their mode."""
PG_URL = os.environ.get("FA_TEST_POSTGRES_URL")
collect_ignore = [] if PG_URL else ["test_cluster.py", "test_formation_crash_e2e.py"]  # run by make test-postgres
"""Many processes need PostgreSQL: the cluster tests exist only under `make test-postgres`."""


LONGEST_FIRST = [
    "test_training_e2e.py", "test_js_device_cohorts.py", "test_console_browser.py", "test_heavy_hitters_e2e.py",
    "test_readme.py", "test_memory_soak.py", "test_schemathesis.py", "test_dp_histogram.py", "test_transport.py",
    "test_feature_stats_e2e.py", "test_checking_the_server.py", "test_safety_floor_e2e.py", "test_identities_e2e.py", "test_tenancy.py", "test_restart.py",
    "test_device_sdk_docs.py", "test_histogram_e2e.py", "test_validation_e2e.py", "test_concurrent.py",
    "test_bad_input.py", "test_dropped_long_polls.py", "test_garbage.py", "test_spec_submit.py", "test_ledger_concurrency.py",
]
"""End-to-end modules by wall time on two cores, longest first (measured; only the order matters). A module not
listed runs before all of these: its length is unknown."""


TIMEOUT_HEADROOM = 1.5
"""A busy machine's pytest timeout gets this much beyond the slowdown at the test's start: its waits are stretched
slice by slice (`deadlines.stretched_wait`) and may get longer still if the load rises during the test."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """End-to-end modules in `LONGEST_FIRST` order (stable: tests keep their order within a module)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, -1) if item.get_closest_marker("e2e") else -2)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """The test's pytest-timeout stretched by the machine's measured slowdown, as its deadlines and waits are
    (runs before pytest-timeout reads the timeout)."""
    factor = deadlines.slowdown()
    if factor > 1.0 and item.get_closest_marker("e2e"):
        factor *= TIMEOUT_HEADROOM
        marker = item.get_closest_marker("timeout")
        base = float(marker.args[0]) if marker and marker.args else float(item.config.getini("timeout") or 0)
        if base > 0:
            item.add_marker(pytest.mark.timeout(round(base * factor)), append=False)
    yield


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "db_url" in metafunc.fixturenames:
        params = [pytest.param("sqlite", id="sqlite")]
        if PG_URL:
            params.append(pytest.param("postgres", id="postgres", marks=pytest.mark.postgres))
        metafunc.parametrize("db_url", params, indirect=True)


@pytest.fixture
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    url = worker_database(PG_URL) if PG_URL and request.param == "postgres" else f"sqlite+aiosqlite:///{tmp_path / 'fa.db'}"
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


@pytest.fixture(autouse=True)
def fitted_deadlines(monkeypatch: pytest.MonkeyPatch) -> None:
    """`AnalystClient.submit` with the spec's phase deadline fitted to the machine now; every `wait` stretched."""
    submit, wait = AnalystClient.submit, AnalystClient.wait

    def fitted_submit(self: AnalystClient, spec: dict[str, Any]) -> dict[str, Any]:
        fitted = deadlines.fit(spec)
        fitted, note = proving.fit(fitted, 1, FLEET_PROVING_CAP_S)
        if note:
            print(f"[proofs] {note}")
        created = submit(self, fitted)
        before, after = (s.get("cohort", {}).get("phase_timeout_s") for s in (spec, fitted))
        if before != after:  # shown with the test's output when it fails
            print(f"[deadlines] query {created['id']}: phase_timeout_s {before} → {after} "
                  f"({deadlines.speed().describe()})")
        return created

    def fitted_wait(self: AnalystClient, query_id: str, timeout_s: float = 3600, **kwargs: Any) -> dict[str, Any]:
        return deadlines.stretched_wait(lambda seconds: wait(self, query_id, seconds, **kwargs), timeout_s,
                                        f"query {query_id} still running")

    monkeypatch.setattr(AnalystClient, "submit", fitted_submit)
    monkeypatch.setattr(AnalystClient, "wait", fitted_wait)
