"""The per-install quota: a rolling 24-hour window, durable, never exceeded by concurrent charges."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fa_issuer.quota import WINDOW_S, QuotaStore

T0 = 1_800_000_000.0


def test_rolling_window(tmp_path: Path) -> None:
    q = QuotaStore(tmp_path / "q.db", tokens_per_day=2)
    first = q.charge("a", "i", T0)
    assert first.granted and first.used == 1 and first.remaining == 1
    assert q.charge("a", "i", T0 + 3600).granted
    spent = q.charge("a", "i", T0 + 7200)
    assert not spent.granted and spent.used == 2 and spent.limit == 2 and spent.remaining == 0
    assert spent.retry_after_s == pytest.approx(WINDOW_S - 7200)
    assert spent.retry_after_header() == str(int(WINDOW_S - 7200))
    assert not q.charge("a", "i", T0 + WINDOW_S - 1).granted  # the first is still inside the window
    again = q.charge("a", "i", T0 + WINDOW_S + 1)  # the first has left it; the second has not
    assert again.granted and again.used == 2
    assert not q.charge("a", "i", T0 + WINDOW_S + 2).granted
    assert q.charge("a", "i", T0 + WINDOW_S + 3601).granted  # the second left too


def test_installs_and_apps_are_counted_apart(tmp_path: Path) -> None:
    q = QuotaStore(tmp_path / "q.db", tokens_per_day=1)
    assert q.charge("a", "i", T0).granted
    assert q.charge("a", "j", T0).granted
    assert q.charge("b", "i", T0).granted
    assert not q.charge("a", "i", T0).granted
    assert q.used("a", "i", T0) == 1


def test_a_restart_keeps_the_quota(tmp_path: Path) -> None:
    q = QuotaStore(tmp_path / "q.db", tokens_per_day=1)
    assert q.charge("a", "i", T0).granted
    q.close()
    reopened = QuotaStore(tmp_path / "q.db", tokens_per_day=1)
    assert not reopened.charge("a", "i", T0 + 60).granted


def test_refund_takes_back_one_charge(tmp_path: Path) -> None:
    q = QuotaStore(tmp_path / "q.db", tokens_per_day=1)
    charge = q.charge("a", "i", T0)
    q.refund(charge)
    assert q.charge("a", "i", T0).granted


def test_it_stores_only_app_install_and_time(tmp_path: Path) -> None:
    q = QuotaStore(tmp_path / "q.db", tokens_per_day=1)
    q.charge("a", "i", T0)
    assert q.columns() == ["app", "install", "at"]
    assert q.prune(T0 + WINDOW_S + 1) == 1
    assert q.used("a", "i", T0) == 0


@pytest.mark.parametrize("limit", [1, 3])
def test_concurrent_charges_never_exceed_the_quota(tmp_path: Path, limit: int) -> None:
    """64 charges for one install at once, from 16 threads over 4 connections to the file (as 4 processes would
    have): exactly `limit` granted."""
    stores = [QuotaStore(tmp_path / "q.db", tokens_per_day=limit) for _ in range(4)]
    start = threading.Barrier(16)

    def charge(n: int) -> bool:
        if n < 16:
            start.wait()
        return stores[n % 4].charge("a", "i", T0 + n * 1e-3).granted

    with ThreadPoolExecutor(16) as pool:
        granted = sum(pool.map(charge, range(64)))
    assert granted == limit
    assert stores[0].used("a", "i", T0 + 1) == limit
