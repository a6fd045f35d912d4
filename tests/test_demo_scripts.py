"""The demo's own logic (scripts/demo*.py) without a server: deadlines from the calibration, their doubling on
the retry, the check of a noisy release against the truth, the summary's failure rows."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from scripts.demo import summary
from scripts.demo_server import MIN_PHASE_TIMEOUT_S, calibrate, within_intervals
from scripts.demo_training import Deadlines


def test_calibrated_deadlines_have_the_floor_and_scale_with_the_cohort() -> None:
    small, note = calibrate(cohort=40, processes=8)
    large, _ = calibrate(cohort=1000, processes=1)
    assert small.phase_timeout_s >= MIN_PHASE_TIMEOUT_S
    assert large.phase_timeout_s > small.phase_timeout_s or small.phase_timeout_s == MIN_PHASE_TIMEOUT_S
    assert "phase_timeout_s" in note and "\n" not in note


def test_deadlines_apply_keeps_longer_spec_deadlines_and_doubles_on_retry() -> None:
    d = Deadlines(phase_timeout_s=20.0, formation_wait_s=2.0)
    spec = {"kind": "histogram", "cohort": {"min_clients": 5}}
    assert d.apply(spec)["cohort"] == {"min_clients": 5, "phase_timeout_s": 20.0}
    assert d.apply(spec, 2.0)["cohort"]["phase_timeout_s"] == 40.0
    assert d.apply({"cohort": {"phase_timeout_s": 60}})["cohort"]["phase_timeout_s"] == 60
    assert spec["cohort"] == {"min_clients": 5}  # not mutated


def test_within_intervals() -> None:
    ok, check, reason = within_intervals({"a": 10, "b": 5.0, "c": "x"}, {"a": 1.0, "b": 1.0}, {"a": 10.5, "b": 6.5})
    assert ok and reason == "" and "2 values" in check and "1 within 95 %" in check
    ok, _, reason = within_intervals({"a": 10, "b": 5.0}, {"a": 1.0, "b": 1.0}, {"a": 10.5, "b": 7.5})
    assert not ok and "b" in reason
    assert within_intervals({"a": 1}, {}, {"a": 2})[0]


def test_summary_shows_failures_with_their_reason_and_the_log_dir() -> None:
    console = Console(width=200, record=True)
    console.print(summary([{"step": "query: histogram", "ok": False, "check": "query ran to the end",
                            "reason": "5 consecutive cohorts aborted"},
                           {"step": "training: frecency (Rprop)", "ok": True, "check": "mean rank", "reason": ""}],
                          Path("/tmp/fa-demo-logs")))
    text = console.export_text()
    assert "FAILED" in text and "5 consecutive cohorts aborted" in text and "/tmp/fa-demo-logs" in text
    assert " ok " in text
