"""Reuses the in-process server fixtures of tests/analytics_server."""

from tests.analytics_server.conftest import app_server, migrated_url  # noqa: F401
