"""Reuses the in-process server fixtures of tests/analytics_server."""

from tests.analytics_server.conftest import app_server, migrated_template, migrated_url, start_app_server  # noqa: F401
