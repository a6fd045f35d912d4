"""Every kind's `tabulate`: one table per section of its result, numeric cells pointing at their values (so the
result's uncertainty applies), chart hints, and the generic flattening of the base class."""

from __future__ import annotations

import json
from typing import Any

import pytest

from queries.kind import QueryKind
from queries.registry import KINDS, get_kind
from queries.spec import PrivacySpec
from queries.table import ResultTable, flatten, tables_to_json
from queries.templates import TEMPLATES
from queries.uncertainty import value_at


def _cells_point_at_their_values(result: dict[str, Any], tables: list[ResultTable]) -> None:
    for t in tables:
        names = {c.name for c in t.columns}
        for row in t.rows:
            assert set(row) <= names
            for cell in row.values():
                if cell.path is not None:
                    assert value_at(result, cell.path) == cell.value
        if t.chart is not None:
            assert t.chart.x in names and set(t.chart.y) <= names
    assert len({t.name for t in tables}) == len(tables)
    json.dumps(tables_to_json(tables))  # JSON types only


def test_histogram_rows_are_released_then_suppressed_buckets_with_bars() -> None:
    result = {"counts": {"moon": 100, "other": 74}, "suppressed": ["sun"], "clients": 150, "threshold": 25.0}
    [t] = get_kind("histogram").tabulate(result)
    _cells_point_at_their_values(result, [t])
    assert [r["bucket"].value for r in t.rows] == ["moon", "other", "sun"]
    assert t.rows[1]["count"].path == "/counts/other" and t.rows[2]["count"].value is None
    assert t.rows[2]["count"].path is None and t.rows[2]["suppressed"].value is True
    assert t.chart is not None and (t.chart.type, t.chart.x, t.chart.y) == ("bar", "bucket", ("count",))
    assert t.caption is not None and "150 contributors" in t.caption and "25" in t.caption


def test_heavy_hitters_most_frequent_first_with_an_empty_message() -> None:
    result = {"heavy_hitters": [{"value": "a/b", "count": 3}, {"value": "c", "count": 9}], "trie": {"a": 3},
              "rounds": 4, "mode": "secagg"}
    t, trie = get_kind("heavy_hitters").tabulate(result)
    _cells_point_at_their_values(result, [t, trie])
    assert [(r["prefix"].value, r["count"].path) for r in trie.rows] == [("a", "/trie/a")]
    assert [(r["rank"].value, r["value"].value, r["count"].path) for r in t.rows] == [
        (1, "c", "/heavy_hitters/1/count"), (2, "a/b", "/heavy_hitters/0/count")]
    empty, _ = get_kind("heavy_hitters").tabulate({"heavy_hitters": [], "rounds": 2})
    assert empty.rows == () and empty.empty is not None and "2 rounds" in empty.empty


def test_feature_stats_one_row_per_feature_and_a_histogram_section_per_feature() -> None:
    result = {"features": {"a/x": {"count": 10, "mean": 1.5, "var": 0.25, "std": 0.5, "lower": 0.0, "upper": 4.0,
                                   "histogram": {"edges": [0.0, 2.0, 4.0], "counts": [7, 3]}},
                           "b": {"count": 10, "mean": 2.0, "var": 1.0, "std": 1.0, "lower": 0.0, "upper": 4.0}},
              "suppressed": ["c"], "clients": 10, "scaler": {}}
    tables = get_kind("feature_stats").tabulate(result)
    _cells_point_at_their_values(result, tables)
    main, hist = tables
    assert [r["feature"].value for r in main.rows] == ["a/x", "b"]
    assert main.rows[0]["mean"].path == "/features/a~1x/mean" and main.rows[0]["lower"].path is None
    assert main.caption is not None and "suppressed: c" in main.caption
    assert hist.name == "histogram:a/x" and [r["count"].value for r in hist.rows] == [7, 3]
    assert hist.rows[1]["count"].path == "/features/a~1x/histogram/counts/1" and hist.chart is not None


def test_training_history_with_a_line_chart_then_the_weights() -> None:
    history = [{"round": 0, "loss": 0.9, "accuracy": 0.5, "clients": 40}, {"round": 5, "loss": 0.4, "note": "x", "clients": 41}]
    result = {"history": history, "weights": [0.1, -0.2], "weight_names": None, "model": {"name": "logistic"},
              "rounds": 5, "server_rounds": 7, "stop_reason": "completed", "best_round": 5}
    tables = get_kind("training").tabulate(result)
    _cells_point_at_their_values(result, tables)
    hist, weights = tables
    assert [c.name for c in hist.columns] == ["round", "loss", "accuracy", "note", "clients"]
    assert hist.rows[1]["loss"].path == "/history/1/loss" and "accuracy" not in hist.rows[1]
    assert hist.rows[1]["note"].path is None  # text: no uncertainty
    assert hist.chart is not None and (hist.chart.type, hist.chart.y) == ("line", ("loss", "accuracy"))
    assert [r["weight"].path for r in weights.rows] == ["/weights/0", "/weights/1"]
    assert [r["name"].value for r in weights.rows] == [None, None]
    _, named = get_kind("training").tabulate({**result, "features": ["age"]})  # a linear model: features, then bias
    assert [r["name"].value for r in named.rows] == ["age", "bias"]


def test_the_default_flattens_any_result_with_pointers() -> None:
    result = {"a": {"b/c": 1.5, "d": [1, 2]}, "e": [{"f": 2}], "g": "text", "h": True}
    t = flatten(result)
    _cells_point_at_their_values(result, [t])
    got = {r["key"].value: (r["value"].value, r["value"].path) for r in t.rows}
    assert got == {"a.b/c": (1.5, "/a/b~1c"), "a.d": ("1, 2", None), "e[0].f": (2, "/e/0/f"), "g": ("text", None),
                   "h": (True, None)}


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_every_kind_tabulates_its_release_of_nothing(kind: QueryKind[Any, Any]) -> None:
    """A kind must accept any result `finalize` returns, including that of a query stopped before its first round."""
    params = kind.parse_params(_minimal_params(kind.name))
    release = kind.finalize(params, kind.initial_state(params), "stopped")
    tables = kind.tabulate(release.result)
    assert tables and all(isinstance(t, ResultTable) for t in tables)
    _cells_point_at_their_values(release.result, tables)


def _minimal_params(name: str) -> dict[str, Any]:
    """The params of the kind's starter spec (`fa init KIND`), bound to its privacy block."""
    spec = TEMPLATES[name].spec
    return get_kind(name).bind_privacy(dict(spec.get("params") or {}), PrivacySpec.model_validate(spec.get("privacy") or {}))
