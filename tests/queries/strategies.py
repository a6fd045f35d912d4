"""Hypothesis strategies per query kind: valid params, and device rows for given params — including
extreme but valid rows (values far outside the bounds, ±inf, NaN, missing or mistyped fields, more rows
than a device may use) and junk a device must ignore.

`kind_data(kind)` is what the conformance suite (`test_conformance.py`) draws from: the hand-written strategies of
`KIND_DATA` when the kind has some, otherwise its declared examples (`QueryKind.examples`: their params, and their rows
with junk mixed in), so a new kind runs the suite without an entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

from fleet_sim import urlbar_sim
from queries.training import frecency

Rows = st.SearchStrategy[list[Any]]

JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)
"""Values of any type, as a device's collection may hold them."""

EXTREME_FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e308, -1e308, 5e-324, float("inf"), float("-inf"), float("nan")]),
    st.integers(-(2**63), 2**63),
)


@dataclass(frozen=True)
class KindData:
    params: st.SearchStrategy[dict[str, Any]]
    rows: Callable[[dict[str, Any]], Rows]
    """Rows of one device, given the query's raw params."""


# --- histogram ----------------------------------------------------------------------------------------

_names = st.text(alphabet="abcxyz0123-", min_size=1, max_size=6)


@st.composite
def histogram_params(draw: st.DrawFn) -> dict[str, Any]:
    buckets = draw(st.lists(_names, min_size=1, max_size=8, unique=True))
    other = draw(st.one_of(st.none(), _names.filter(lambda n: n not in buckets)))
    slots = len(buckets) + (other is not None)
    raw: dict[str, Any] = {
        "buckets": buckets,
        "max_contributions_per_device": draw(st.integers(1, slots)),
        "false_release_rate": draw(st.sampled_from([1e-9, 0.05, 0.5])),
        "min_release_count": draw(st.sampled_from([0, 1, 5])),
    }
    if other is not None:
        raw["other_bucket"] = other
    if draw(st.booleans()):
        raw["release_threshold"] = draw(st.sampled_from([0, 1, 3]))
    return raw


def histogram_rows(raw: dict[str, Any]) -> Rows:
    value = st.one_of(st.sampled_from(raw["buckets"]), st.integers(-5, 5), _names, JUNK)
    return st.lists(st.one_of(value, st.fixed_dictionaries({"value": value})), max_size=40)


# --- feature_stats ------------------------------------------------------------------------------------

_bounds = st.tuples(st.floats(-1e12, 1e12), st.floats(1e-6, 1e12)).map(lambda lw: (lw[0], lw[0] + lw[1])).filter(
    lambda lu: lu[0] < lu[1]
)


@st.composite
def feature_stats_params(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(st.text(alphabet="abc_", min_size=1, max_size=4), min_size=1, max_size=4, unique=True))
    features = []
    for name in names:
        lower, upper = draw(_bounds)
        features.append({"name": name, "lower": lower, "upper": upper})
    raw: dict[str, Any] = {
        "features": features,
        "max_examples_per_device": draw(st.sampled_from([1, 3, 10, 100_000])),
        "min_count": draw(st.integers(0, 3)),
    }
    if draw(st.booleans()):
        raw["bins"] = draw(st.integers(1, 5))
    if draw(st.booleans()):
        raw["count_second_round"] = True  # what the submit sets with validity proofs (one count bin without bins)
    if draw(st.booleans()):
        raw["precision_bits"] = draw(st.integers(8, 40))
    return raw


def feature_stats_rows(raw: dict[str, Any]) -> Rows:
    names = [f["name"] for f in raw["features"]]
    in_bounds = st.sampled_from(raw["features"]).flatmap(lambda f: st.floats(f["lower"], f["upper"]))
    value = st.one_of(in_bounds, EXTREME_FLOATS, JUNK)
    row = st.dictionaries(st.sampled_from(names + ["other"]), value, max_size=len(names) + 1)
    return st.lists(st.one_of(row, JUNK), max_size=25)


# --- heavy_hitters ------------------------------------------------------------------------------------


@st.composite
def heavy_hitters_params(draw: st.DrawFn) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "mode": draw(st.sampled_from(["triehh", "secagg"])),
        "max_length": draw(st.integers(1, 4)),
        "alphabet": draw(st.sampled_from(["ab", "abc", "xyz01", "Aa"])),
        "casefold": draw(st.booleans()),
        "max_words_per_device": draw(st.integers(1, 3)),
        "max_frontier": draw(st.integers(1, 6)),
    }
    if raw["mode"] == "triehh":
        raw |= {"theta": draw(st.sampled_from([1, 1, 2])), "sample_rate": 1.0}
    elif draw(st.booleans()):
        raw["release_threshold"] = draw(st.sampled_from([0.5, 1, 2]))
    return raw


def heavy_hitters_rows(raw: dict[str, Any]) -> Rows:
    alphabet, length = raw["alphabet"], raw["max_length"]
    shared = [alphabet[0] * n for n in range(1, length + 1)] + [alphabet[-1] * length]  # reach deep rounds
    word = st.one_of(st.sampled_from(shared), st.text(alphabet=alphabet, min_size=1, max_size=length))
    longest = st.text(alphabet=alphabet, min_size=length, max_size=length)
    odd = st.one_of(
        word.map(lambda w: f"  {w.upper()}\t"),  # whitespace, case
        st.text(alphabet=alphabet, min_size=length + 1, max_size=length + 3),  # too long
        st.text(max_size=6),  # any unicode
        JUNK,
    )
    return st.lists(st.one_of(word, longest, odd), max_size=12)


# --- training -----------------------------------------------------------------------------------------

_optimizers = st.one_of(
    st.fixed_dictionaries({"name": st.just("fedavg"), "lr": st.sampled_from([0.1, 1.0, 1e4])}),
    st.fixed_dictionaries({"name": st.just("adam"), "lr": st.sampled_from([0.01, 1.0])}),
    st.fixed_dictionaries({"name": st.just("rprop"), "votes": st.sampled_from(["sign", "clipped"])}),
)


@st.composite
def training_params(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.integers(0, 5)) == 0:  # the black-box frecency example (metrics in its evaluation vector)
        raw = frecency.example_params(rounds=draw(st.integers(1, 2)), eval_every=draw(st.integers(0, 2)))
        raw["client"] = {**raw["client"], "max_examples": draw(st.sampled_from([1, 5, 200]))}
        raw["precision_bits"] = draw(st.integers(4, 30))
        return raw
    n_features = draw(st.integers(1, 3))
    name = draw(st.sampled_from(["logistic", "linear", "softmax", "mlp"]))
    model: dict[str, Any] = {"name": name, "n_features": n_features}
    if name in ("softmax", "mlp"):
        model["n_classes"] = draw(st.integers(2, 3))
    if name == "mlp":
        model["hidden"] = draw(st.integers(1, 3))
    return {
        "model": model,
        "rounds": draw(st.integers(1, 2)),
        "eval_every": draw(st.integers(0, 2)),
        "client": {
            "epochs": draw(st.integers(1, 2)),
            "batch_size": draw(st.integers(0, 3)),
            "lr": draw(st.sampled_from([0.01, 1.0, 1e4])),
            "max_examples": draw(st.sampled_from([1, 4, 1000])),
        },
        "server_optimizer": draw(_optimizers),
        "clip_norm": draw(st.sampled_from([0.01, 1.0, 100.0])),
        "weighting": draw(st.sampled_from(["examples", "uniform"])),
        "precision_bits": draw(st.integers(4, 30)),
        "weight_share": draw(st.sampled_from([0.01, 0.25, 1.0])),
        "holdout_fraction": draw(st.sampled_from([0.0, 0.3, 0.9])),
        "class_weighting": name != "linear" and draw(st.booleans()),
        "loss_cap": draw(st.sampled_from([0.1, 10.0])),
    }


def training_rows(raw: dict[str, Any]) -> Rows:
    model = raw["model"]
    if model["name"] == "frecency":
        return st.builds(
            lambda seed, n: urlbar_sim.make_device_rows(np.random.default_rng(seed), n_interactions=n),
            st.integers(0, 2**32 - 1), st.integers(0, 6),
        )
    n = model["n_features"]
    classes = model.get("n_classes", 2 if model["name"] == "logistic" else None)
    x = st.lists(st.floats(-1e4, 1e4), min_size=n, max_size=n)
    y = st.integers(0, classes - 1) if classes else st.floats(-1e4, 1e4)
    valid = st.fixed_dictionaries({"x": x, "y": y})
    invalid = st.one_of(
        st.fixed_dictionaries({"x": st.lists(EXTREME_FLOATS, max_size=n + 1), "y": st.one_of(y, JUNK)}),
        st.fixed_dictionaries({"x": x, "y": st.one_of(st.integers(-3, 5), JUNK)}),
        st.fixed_dictionaries({"x": st.dictionaries(st.text(max_size=2), st.floats(), max_size=2), "y": y}),
        JUNK,
    )
    return st.lists(st.one_of(valid, valid, invalid), max_size=15)


KIND_DATA: dict[str, KindData] = {
    "histogram": KindData(histogram_params(), histogram_rows),
    "feature_stats": KindData(feature_stats_params(), feature_stats_rows),
    "heavy_hitters": KindData(heavy_hitters_params(), heavy_hitters_rows),
    "training": KindData(training_params(), training_rows),
}


def example_data(kind: Any) -> KindData:
    """The default strategies of a kind without hand-written ones: one of its examples' params; its rows for those
    params, a subset in any order, with junk rows added (which the kind must ignore)."""
    examples = list(kind.examples)
    if not examples:
        raise AssertionError(f"kind {kind.name!r} declares no examples (QueryKind.examples) and has no KIND_DATA entry")

    def rows(raw: dict[str, Any]) -> Rows:
        mine = [r for e in examples if e.params == raw for r in e.rows]
        return st.lists(st.one_of(st.sampled_from(mine), JUNK) if mine else JUNK, max_size=8)

    return KindData(st.sampled_from([e.params for e in examples]), rows)


def kind_data(kind: Any) -> KindData:
    """The strategies the conformance suite draws from for `kind`."""
    return KIND_DATA.get(kind.name) or example_data(kind)
