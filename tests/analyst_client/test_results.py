"""The generic result rendering of the Python client and `fa`: rows/frame and the text tables are built from the
result's tables (`view["table"]`, queries.table) and the server's per-value uncertainty, with no per-kind code."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

from analyst_client.client import frame, rows, table_of, uncertainty_of
from analyst_client.view import format_result
from queries.registry import get_kind
from queries.table import tables_to_json


def _view(kind: str, result: dict[str, Any], uncertainty: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A result view as GET /v1/queries/{id}/result answers it (the table from the kind's tabulate)."""
    return {"id": "q", "kind": kind, "result": result, "privacy": {"mechanism": "none", "t_min": 100},
            "uncertainty": uncertainty, "warnings": [], "table": tables_to_json(get_kind(kind).tabulate(result)), **extra}


def _histogram() -> dict[str, Any]:
    return _view("histogram", {"counts": {"moon": 100, "other": 74}, "suppressed": ["sun"], "clients": 150,
                               "threshold": 25.0},
                 {"/counts/moon": {"std": 7.88, "ci95": [84.6, 115.4]}, "/counts/other": {"std": 5.0, "ci95": [60.0, 88.0]}})


def test_histogram_rows_keep_their_columns_and_the_servers_intervals() -> None:
    view = _histogram()
    columns, data = rows(view)
    assert columns == ["bucket", "count", "std", "ci95_lo", "ci95_hi", "suppressed"]
    assert [r["bucket"] for r in data] == ["moon", "other", "sun"]
    assert data[1] == {"bucket": "other", "count": 74, "std": 5.0, "ci95_lo": 60.0, "ci95_hi": 88.0, "suppressed": False}
    assert data[2] == {"bucket": "sun", "count": None, "std": None, "ci95_lo": None, "ci95_hi": None, "suppressed": True}
    text = format_result(view, "table", plot=True)
    assert "100 ± 15" in text and "74 ± 14" in text and "[60, 88]" in text and "suppressed" in text
    assert "█" in text and "150 contributors" in text
    assert format_result(view, "csv").splitlines()[0] == "bucket,count,std,ci95_lo,ci95_hi,suppressed"


def test_uncertainty_is_the_servers_only() -> None:
    view = _histogram()
    u = uncertainty_of(view, "/counts/other", 74)
    assert u is not None and (u.lo, u.hi, u.half) == (60.0, 88.0, 14.0)
    assert uncertainty_of(view, "/counts/sun", None) is None and uncertainty_of(view, None) is None
    derived = uncertainty_of({"uncertainty": {"/x": {"std": 1.0}}}, "/x", 10.0)
    assert derived is not None and derived.half == pytest.approx(1.96, rel=1e-3)


def test_training_history_is_one_row_per_round_with_a_sparkline_and_the_weights_section() -> None:
    history = [{"round": r, "loss": 1.0 / (r + 1), "eval_loss": 1.1 / (r + 1), "accuracy": 0.5 + r / 40, "clients": 50}
               for r in (0, 5, 10)]
    view = _view("training", {"history": history, "weights": [0.1] * 31, "model": {"name": "logistic"}, "rounds": 10},
                 {"/history/1/accuracy": {"std": 0.01, "ci95": [0.605, 0.645]}})
    columns, data = rows(view)
    assert columns[:2] == ["round", "loss"] and "accuracy_ci95_lo" in columns and columns[-1] == "clients"
    assert len(data) == 3 and data[1]["accuracy_ci95_lo"] == 0.605 and data[0]["accuracy_ci95_lo"] is None
    wcols, weights = rows(view, section="weights")
    assert len(weights) == 31 and weights[0]["weight"] == 0.1
    text = format_result(view, "table", plot=True)
    assert "history, one row per evaluation round" in text and "0.625 ± 0.020" in text and "▁" in text
    assert "weights: 31 rows" in text and "history[" not in text
    # an interval not centred on its value (clamped at a bound, a count released above a threshold) shows its ends
    clamped = {**view, "uncertainty": {"/history/1/accuracy": {"std": 0.01, "ci95": [0.6, 0.64]}}}
    assert "0.625 [0.600, 0.640]" in format_result(clamped, "table") and "0.625 ±" not in format_result(clamped, "table")
    exact = format_result({**view, "uncertainty": {}}, "table")
    assert "95 % interval" not in exact and "0.625" in exact  # no noisy value: no interval column
    with pytest.raises(KeyError, match="sections: history, weights"):
        table_of(view, "nope")


def test_feature_histograms_are_drawn_under_plot() -> None:
    result = {"features": {"x": {"count": 10, "mean": 1.5, "var": 0.25, "std": 0.5, "lower": 0.0, "upper": 4.0,
                                 "histogram": {"edges": [0.0, 2.0, 4.0], "counts": [7, 3]}}}, "clients": 10}
    view = _view("feature_stats", result, {"/features/x/mean": {"std": 0.1, "ci95": [1.3, 1.7]}})
    columns, data = rows(view)
    assert columns[:2] == ["feature", "count"] and data[0]["mean_ci95_hi"] == 1.7 and data[0]["lower"] == 0.0
    plain = format_result(view, "table")
    assert "1.50 ± 0.20" in plain and "x histogram: 2 rows" in plain
    plotted = format_result(view, "table", plot=True)
    assert "x histogram" in plotted and "[0, 2)" in plotted and "█" in plotted


def test_a_view_without_tables_is_flattened_and_heavy_hitters_say_when_empty() -> None:
    old = {"id": "q", "kind": "histogram", "result": {"counts": {"a": 3}, "clients": 5}, "privacy": {}}
    columns, data = rows(old)
    assert columns == ["key", "value", "std", "ci95_lo", "ci95_hi"]
    assert [(r["key"], r["value"], r["std"]) for r in data] == [("counts.a", 3, None), ("clients", 5, None)]
    empty = _view("heavy_hitters", {"heavy_hitters": [], "rounds": 3, "mode": "secagg"}, {})
    assert "no string reached the release threshold (3 rounds)" in format_result(empty, "table")


def test_frame_needs_pandas_only_when_called(monkeypatch: pytest.MonkeyPatch) -> None:
    pd = pytest.importorskip("pandas")
    df = frame(_histogram())
    assert isinstance(df, pd.DataFrame) and list(df["bucket"]) == ["moon", "other", "sun"]
    assert df.loc[df.bucket == "other", "ci95_hi"].item() == 88.0 and np.isnan(df.loc[df.bucket == "sun", "count"].item())
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r"pip install 'fed-analytics\[pandas\]'"):
        frame(_histogram())


def test_a_result_without_proofs_says_so_above_its_values() -> None:
    from analytics_server.validation import trust_warnings

    view = _histogram()
    view["privacy"]["validation"] = "none"
    view["warnings"] = trust_warnings(view["privacy"]) + [{"path": "/counts/other", "message": "wide"}]
    lines = format_result(view, "table").splitlines()
    assert lines[0].startswith("histogram result") and lines[1].startswith("WARNING — no device proved")
    assert any(line.startswith("warning: /counts/other") for line in lines[2:])
    assert trust_warnings({"validation": "proofs"}) == []
