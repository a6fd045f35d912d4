"""Tests that need a tool the project installs from Debian packages (Node and npm, Chromium): under CI (CI set, as
`.ci/run` sets it) a missing tool fails the test — CI installs them, so nothing is skipped there; on a developer's
machine without it the test is skipped with the reason."""

from __future__ import annotations

import os

import pytest


def require(missing: str | None, what: str) -> None:
    """Return when `missing` is None; else fail under CI, skip elsewhere, saying `what` needs it and why."""
    if missing is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must provide {what}: {missing}")
    pytest.skip(f"{what}: {missing}")
