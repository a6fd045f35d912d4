"""/v1/openapi.json documents the submit body per kind (discriminated on `kind`), with every bound of the
kinds' params visible, so that a schema-driven client or fuzzer can build specs the server accepts."""

from __future__ import annotations

from typing import Any

import pytest

from analytics_server import openapi, spec_check
from analytics_server.settings import Settings
from fa_common.errors import Invalid
from queries import feature_stats, histogram, spec
from queries.heavy_hitters import kind as hh
from queries.registry import KINDS
from queries.training import limits

DOC = openapi.build()
SCHEMAS: dict[str, Any] = DOC["components"]["schemas"]


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = SCHEMAS[node["$ref"].rsplit("/", 1)[1]]
    return node


def _prop(model: str, *path: str) -> dict[str, Any]:
    node = SCHEMAS[model]
    for name in path:
        node = _resolve(node)["properties"][name]
    return node


def _numbers(node: dict[str, Any], key: str) -> set[Any]:
    """Every value of `key` inside a (possibly anyOf-wrapped) property schema."""
    found = {node[key]} if key in node else set()
    for alt in node.get("anyOf", []) + node.get("oneOf", []):
        found |= _numbers(alt, key)
    if "items" in node:
        found |= _numbers(node["items"], key)
    return found


def test_submit_body_is_discriminated_on_kind() -> None:
    body = DOC["paths"]["/v1/queries"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    root = _resolve(body)
    assert root["discriminator"]["propertyName"] == "kind"
    assert set(root["discriminator"]["mapping"]) == set([k.name for k in KINDS])
    for ref in root["oneOf"]:
        variant = _resolve(ref)
        assert variant["additionalProperties"] is False
        assert set(variant["required"]) >= {"kind", "source", "params"}
        name = variant["properties"]["kind"]["const"]
        params = _resolve(variant["properties"]["params"])
        assert params["additionalProperties"] is False, name  # params are closed per kind, not a free object


def test_bounds_are_visible_as_maximum_maxitems_maxlength() -> None:
    assert _numbers(_prop("TrainingQuerySpec", "params", "model", "n_features"), "maximum") == {limits.MAX_FEATURES}
    assert _numbers(_prop("TrainingQuerySpec", "params", "model", "hidden"), "maximum") == {limits.MAX_HIDDEN}
    assert _numbers(_prop("TrainingQuerySpec", "params", "model", "n_classes"), "maximum") == {limits.MAX_CLASSES}
    assert _prop("TrainingQuerySpec", "params", "rounds")["maximum"] == limits.MAX_ROUNDS
    assert _numbers(_prop("TrainingQuerySpec", "params", "features"), "maxItems") == {limits.MAX_FEATURES}
    assert _numbers(_prop("TrainingQuerySpec", "params", "clients_per_round"), "maximum") == {limits.MAX_CLIENTS}
    assert set(_prop("TrainingQuerySpec", "params", "model", "name")["enum"]) >= {"logistic", "softmax", "mlp", "linear"}
    assert _prop("HistogramQuerySpec", "params", "buckets")["maxItems"] == histogram.MAX_BUCKETS
    assert _prop("HistogramQuerySpec", "params", "buckets")["items"]["maxLength"] == histogram.MAX_BUCKET_CHARS
    assert _prop("FeatureStatsQuerySpec", "params", "features")["maxItems"] == feature_stats.MAX_FEATURES
    assert _numbers(_prop("FeatureStatsQuerySpec", "params", "bins"), "maximum") == {feature_stats.MAX_BINS}
    assert _prop("HeavyHittersQuerySpec", "params", "alphabet")["maxLength"] == hh.MAX_ALPHABET
    assert _prop("HeavyHittersQuerySpec", "params", "max_frontier")["maximum"] == hh.MAX_FRONTIER
    assert _prop("HeavyHittersQuerySpec", "params", "max_length")["maximum"] == hh.MAX_LENGTH
    assert _numbers(_prop("HeavyHittersQuerySpec", "params", "theta"), "maximum") == {hh.MAX_THETA}
    assert _prop("HistogramQuerySpec", "cohort", "max_clients")["maximum"] == spec.MAX_CLIENTS
    assert _numbers(_prop("HistogramQuerySpec", "privacy", "epsilon"), "maximum") == {spec.MAX_EPSILON}
    assert _prop("HistogramQuerySpec", "params")["$ref"].endswith("/HistogramParams")


def test_every_kind_has_an_example_body_the_server_accepts() -> None:
    examples = DOC["paths"]["/v1/queries"]["post"]["requestBody"]["content"]["application/json"]["examples"]
    assert set(examples) == set([k.name for k in KINDS])
    for name, example in examples.items():
        checked = spec_check.check_spec(example["value"], Settings())
        assert checked.spec.kind == name


def test_spec_types_are_strict_like_the_schema() -> None:
    """A value of the wrong JSON type is refused, not coerced (the schema says integer/number/boolean)."""
    body = {"kind": "histogram", "source": "s", "params": {"buckets": ["a"]}}
    for bad in ({"cohort": {"min_clients": "10"}}, {"cohort": {"min_clients": 10.5}},
                {"params": {"buckets": ["a"], "min_release_count": False}},
                {"params": {"buckets": ["a"], "max_contributions_per_device": True}}):
        with pytest.raises(Invalid):
            spec_check.check_spec({**body, **bad}, Settings())
