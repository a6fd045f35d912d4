"""Generated query bodies against `POST /v1/queries` and `POST /v1/queries/preview`, in process: no answer is a 5xx.

Bodies are drawn around the submit schema `/v1/openapi.json` publishes (`analytics_server.openapi.build`: one variant
per registered kind, its `params` the kind's own schema with every bound). To reach the checks behind the schema (the
kind's resolution, privacy calibration, noise plans, the preview's expected noise, storing and logging the spec) most
bodies start from a spec the server accepts — a random kind's params from `tests.queries.strategies`, its declared
examples or the rich specs below (every optional feature on), under a noisy or no privacy block — and get one to three
of their fields, at any depth, replaced by a value at the edge of the field's schema (at and just past each bound,
subnormals, −0.0, the largest floats, integers no float holds exactly, NaN and infinities, strings at and past their
length limit, lone surrogates) or by any value of the field's shape, deleted, or joined by an unknown key. The others
are drawn from a kind's schema alone, or are any JSON at all.

Two tests: `test_no_generated_body_gets_a_5xx` (hypothesis, `FUZZ_EXAMPLES` derandomized examples, no example database:
the same run every time; `FA_SPEC_FUZZ_EXAMPLES` and `FA_SPEC_FUZZ_SEED` search longer or elsewhere) and
`test_every_field_at_its_edges` (every numeric field of the rich specs, one at a time, at its bounds, the smallest
normal float and 1e300: exhaustive, because a single bad field is the commonest bad input and random draws reach a
given one rarely — a `bound_budget_share` of 5e-324 needed ~10⁵ of them).
Every answer must be a 2xx or a 4xx, a 4xx a JSON object with a non-empty `error`; the sweep also requires a 422 to
name the field it changed. Accepted queries are stored, never run.

The bad inputs of issue 46 and those these tests found are pinned as plain regression tests at the end.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path as FilePath
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from hypothesis import HealthCheck, event, example, given, seed, settings
from hypothesis import strategies as st

from analytics_server import openapi
from analytics_server.state import STATE
from queries.registry import KINDS
from queries.spec import MAX_FORMATION_TIMEOUT_S, MIN_FORMATION_TIMEOUT_S, MIN_PHASE_TIMEOUT_S
from queries.training import frecency
from tests.queries.strategies import kind_data

FUZZ_EXAMPLES = int(os.environ.get("FA_SPEC_FUZZ_EXAMPLES", "150"))
FUZZ_SEED = int(os.environ.get("FA_SPEC_FUZZ_SEED", "46"))

DOC = openapi.build()
SCHEMAS: dict[str, Any] = DOC["components"]["schemas"]
SUBMIT = DOC["paths"]["/v1/queries"]["post"]["requestBody"]["content"]["application/json"]["schema"]
ROUTES = ("/v1/queries/preview", "/v1/queries")
SUBNORMAL = 5e-324
"""The smallest positive float (4.9e-324 in JSON)."""
SMALLEST_NORMAL = 2.2250738585072014e-308


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = SCHEMAS[node["$ref"].rsplit("/", 1)[1]]
    return node


VARIANTS: dict[str, dict[str, Any]] = {
    _resolve(ref)["properties"]["kind"]["const"]: _resolve(ref) for ref in _resolve(SUBMIT)["oneOf"]
}
"""Each kind's submit schema (the envelope with `kind` fixed and `params` the kind's)."""


def _variant(body: Any) -> dict[str, Any]:
    kind = body.get("kind") if isinstance(body, dict) else None
    return VARIANTS[kind] if isinstance(kind, str) and kind in VARIANTS else _resolve(SUBMIT)


# --- values ---------------------------------------------------------------------------------------------------------

EDGE_FLOATS = [0.0, -0.0, SUBNORMAL, -SUBNORMAL, SMALLEST_NORMAL, 1e-300, 1e-30, 1e-9, 0.5, 1.0, 2.0, 1e9, 1e300,
               1.7976931348623157e308, -1.7976931348623157e308, math.nan, math.inf, -math.inf]
EDGE_INTS = [0, 1, -1, 2, 3, 2**31, 2**53 - 1, 2**53, 2**53 + 1, 2**63, -(2**63) - 1, 10**30, 10**400]
"""2**53 + 1 is the first integer a float cannot hold; 10**400 one no float holds at all (`float()` overflows)."""
ODD_TEXT = ["", " ", "\x00", "\ud800", "a\udfff", "NaN", "1e400", "é" * 300]
"""Lone surrogates ("\\ud800") are no Unicode text: they cannot be encoded as UTF-8."""

junk: st.SearchStrategy[Any] = st.recursive(
    st.one_of(st.none(), st.booleans(), st.sampled_from(EDGE_INTS), st.integers(), st.sampled_from(EDGE_FLOATS),
              st.floats(), st.text(max_size=8), st.sampled_from(ODD_TEXT)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=12,
)
"""Any JSON value, nested."""


def _near(bound: float) -> list[float]:
    """A bound, the floats either side of it, and values a little and a lot past it."""
    out = [bound, math.nextafter(bound, math.inf), math.nextafter(bound, -math.inf), bound - 1, bound + 1, bound * 2,
           -bound]
    return [v for v in out if math.isfinite(v)]


def _bounds(schema: dict[str, Any]) -> list[float]:
    return [schema[k] for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum") if k in schema]


def _typed(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The non-null alternatives of a (possibly anyOf/oneOf) schema, resolved."""
    schema = _resolve(schema)
    alternatives = [_resolve(a) for a in schema.get("anyOf", schema.get("oneOf", []))] or [schema]
    return [a for a in alternatives if a.get("type") != "null"]


def _edges(schema: dict[str, Any]) -> list[Any]:
    """The edge values of a leaf schema (number, integer, string), or [] for other shapes."""
    out: list[Any] = []
    for alt in _typed(schema):
        kind = alt.get("type")
        if kind == "number":
            out += [v for b in _bounds(alt) for v in _near(float(b))] + EDGE_FLOATS + EDGE_INTS
        elif kind == "integer":
            out += [int(b) + d for b in _bounds(alt) for d in (-1, 0, 1)] + EDGE_INTS + [1.5, SUBNORMAL, True]
        elif kind == "string":
            limits = [n for n in (alt.get("minLength"), alt.get("maxLength")) if n is not None and n <= 300]
            out += ODD_TEXT + ["a" * k for n in limits for k in (max(0, n - 1), n, n + 1)]
    return out


def sweep_values(schema: dict[str, Any]) -> list[Any]:
    """The few values the sweep tries on a numeric leaf: each bound itself (the extremes the server must accept, or
    refuse cleanly for a rule between fields), the smallest normal float and a huge one — values no single bound
    stops. (Subnormals, integers beyond 2^53 − 1, NaN, infinities and lone surrogates are refused for every field
    alike, before any kind sees them: `queries.spec.json_problem`; the generated bodies and the tests at the end
    cover them.)"""
    out: list[Any] = []
    for alt in _typed(schema):
        kind = alt.get("type")
        if kind == "number":
            out += [b for b in _bounds(alt) if math.isfinite(b)] + [SMALLEST_NORMAL, 1e300]
        elif kind == "integer":
            out += [int(b) for b in _bounds(alt)]
    return list({json.dumps(v): v for v in out}.values())  # distinct as JSON


def _number(draw: st.DrawFn, schema: dict[str, Any]) -> Any:
    low = max(schema.get("minimum", -math.inf), schema.get("exclusiveMinimum", -math.inf))
    high = min(schema.get("maximum", math.inf), schema.get("exclusiveMaximum", math.inf))
    valid = st.floats(low, high, exclude_min="exclusiveMinimum" in schema, exclude_max="exclusiveMaximum" in schema,
                      allow_nan=False) if low <= high else st.nothing()
    return draw(st.one_of(valid, st.sampled_from(_edges(schema)), st.integers(-10, 10)))


def _integer(draw: st.DrawFn, schema: dict[str, Any]) -> Any:
    low, high = schema.get("minimum"), schema.get("maximum")
    small = st.integers(low if low is not None else -5, min(high if high is not None else 50, (low or 0) + 50))
    return draw(st.one_of(small, st.sampled_from(_edges(schema))))


def _string(draw: st.DrawFn, schema: dict[str, Any]) -> Any:
    choices = [st.text(max_size=10), st.text(alphabet="abcxyz_019-.:", min_size=1, max_size=10),
               st.sampled_from(_edges(schema))]
    if "pattern" in schema:
        choices.append(st.from_regex(schema["pattern"], fullmatch=True).filter(lambda s: len(s) <= 200))
    return draw(st.one_of(*choices))


def _extra_key(draw: st.DrawFn, known: list[str]) -> str:
    typo = [k[:-1] for k in known if len(k) > 1] + [k + "s" for k in known]
    return draw(st.one_of(st.sampled_from(typo or ["x"]), st.sampled_from(["bogus", "", "__proto__", "a" * 70, "\ud800"]),
                          st.text(max_size=6)))


@st.composite
def from_schema(draw: st.DrawFn, schema: dict[str, Any], depth: int = 0) -> Any:
    """A value around `schema`: mostly of its shape (with edge values), sometimes of any other."""
    schema = _resolve(schema)
    if depth > 6 or draw(st.integers(0, 11)) == 0:
        return draw(junk)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return draw(from_schema(draw(st.sampled_from(schema[key])), depth + 1))
    if "const" in schema:
        return draw(st.sampled_from([schema["const"], schema["const"], "nope"]))
    if "enum" in schema:
        near = [v.upper() for v in schema["enum"] if isinstance(v, str)]
        return draw(st.sampled_from(list(schema["enum"]) + near + ["nope"]))
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        return draw(_object(schema, depth))
    if kind == "array":
        cap = schema.get("maxItems")
        sizes = [0, 1, 2, 3, 5] + ([cap, cap + 1] if cap is not None and cap <= 20 else [])
        sizes += [schema["minItems"]] if "minItems" in schema else []
        return [draw(from_schema(schema.get("items", {}), depth + 1)) for _ in range(draw(st.sampled_from(sizes)))]
    if kind == "number":
        return _number(draw, schema)
    if kind == "integer":
        return _integer(draw, schema)
    if kind == "string":
        return _string(draw, schema)
    if kind == "boolean":
        return draw(st.booleans())
    if kind == "null":
        return None
    return draw(junk)


@st.composite
def _object(draw: st.DrawFn, schema: dict[str, Any], depth: int) -> dict[str, Any]:
    props: dict[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", []))
    out: dict[str, Any] = {}
    for name, sub in props.items():
        if draw(st.integers(0, 9)) > (0 if name in required else 5):
            out[name] = draw(from_schema(sub, depth + 1))
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):  # a map (e.g. weights by name): a few entries
        for _ in range(draw(st.integers(0, 3))):
            key = draw(st.sampled_from(["w0", "w1", "a", "", "w99999"]) | st.text(max_size=4))
            out[key] = draw(from_schema(extra, depth + 1))
    if draw(st.integers(0, 7)) == 0:
        out[_extra_key(draw, list(props))] = draw(junk)
    return out


# --- accepted specs, and their fields -------------------------------------------------------------------------------

RICH: dict[str, list[dict[str, Any]]] = {
    "histogram": [
        {"buckets": ["moon", "sun", "star"], "other_bucket": "other", "max_contributions_per_device": 2,
         "false_release_rate": 0.05, "min_release_count": 2},
        {"buckets": ["moon", "sun"], "release_threshold": 5.5},
    ],
    "feature_stats": [
        {"features": [{"name": "a", "lower": 0, "upper": 10}, {"name": "b", "lower": -1.5, "upper": 1}], "bins": 4,
         "clip_at": 0.95, "clip_budget_share": 0.2, "bound_budget_share": 0.1, "max_examples_limit": 50,
         "means_share": 0.6, "min_count": 1},
        {"features": [{"name": "a", "lower": 0, "upper": 10}], "max_examples_per_device": 3, "precision_bits": 12,
         "count_second_round": True},
    ],
    "heavy_hitters": [
        {"mode": "secagg", "max_length": 4, "alphabet": "abc", "max_frontier": 8, "max_words_per_device": 2,
         "false_release_rate": 0.05, "min_release_count": 1},
        {"mode": "secagg", "max_length": 3, "release_threshold": 3.5},
        {"mode": "triehh", "max_length": 4, "epsilon": 4.0, "delta": 1e-6, "population_size": 100000},
        {"mode": "triehh", "max_length": 4, "theta": 4, "sample_rate": 0.1},
    ],
    "quantiles": [
        {"features": [{"name": "a", "lower": 0, "upper": 100}, {"name": "b", "lower": -1, "upper": 1}],
         "quantiles": [0.5, 0.9], "max_examples_per_device": 2, "resolution": 256, "branching": 4},
        {"features": [{"name": "a", "lower": 0, "upper": 100}], "quantiles": [0.25], "levels": 3},
    ],
    "training": [
        {"model": {"name": "mlp", "n_features": 2, "hidden": 3, "n_classes": 3, "l2": 0.01, "seed": 1},
         "rounds": 2, "clients_per_round": 10, "sample_rate": 0.5,
         "client": {"epochs": 1, "batch_size": 4, "lr": 0.1, "max_examples": 100},
         "server_optimizer": {"name": "adam", "lr": 0.1, "beta1": 0.9, "beta2": 0.99, "tau": 1e-3},
         "clip_norm": 1.0, "adaptive_clipping": {"target_quantile": 0.5, "learning_rate": 0.2, "count_share": 0.5},
         "weight_share": 0.25, "eval_every": 1, "patience": 2, "min_delta": 0.0, "holdout_fraction": 0.2,
         "loss_cap": 10.0, "class_weighting": True, "precision_bits": 16},
        {"model": {"name": "logistic", "n_features": 2, "initial_weights": [0.5, 0.25, 0.0]}, "rounds": 2,
         "features": ["x", "y"], "weighting": "examples",
         "server_optimizer": {"name": "rprop", "votes": "clipped", "initial_step": [0.1, 0.1, 0.1], "increase": 1.2,
                              "decrease": 0.5, "step_min": 1e-6, "step_max": {"w0": 10.0}},
         "safeguards": {"max_change": 1.0, "nonnegative": [0, 1], "ordered_groups": [[0, 1]]}},
        {**frecency.example_params(rounds=2), "clients_per_round": 10},
    ],
}
"""Per kind, params the server accepts with every optional feature on (TrieHH under mechanism none, the others under
noise too)."""
NOISE = {"mechanism": "discrete_gaussian", "epsilon": 2.0, "delta": 1e-6}
COHORT_OK = {"min_clients": 10, "max_clients": 100, "phase_timeout_s": 30, "dropout_allowance": 0.15,
             "formation_timeout_s": 600}


def rich_spec(kind: str, params: dict[str, Any]) -> dict[str, Any]:
    privacy = {"mechanism": "none"} if params.get("mode") == "triehh" else NOISE
    return {"kind": kind, "source": "words", "name": "rich", "params": params, "privacy": dict(privacy),
            "cohort": dict(COHORT_OK)}


NOISY = st.fixed_dictionaries({"mechanism": st.sampled_from(["skellam", "discrete_gaussian"]),
                               "epsilon": st.sampled_from([0.5, 1.0, 4.0]), "delta": st.sampled_from([1e-6, 1e-9])},
                              optional={"validation": st.sampled_from(["proofs", "none"]),
                                        "noise_multiplier": st.sampled_from([0.5, 2.0])})
PRIVACY: st.SearchStrategy[dict[str, Any]] = st.one_of(st.just({}), st.just({"mechanism": "none"}), NOISY, NOISY)
"""Half the bases are noisy, so that calibration, noise plans and the preview's expected noise are reached."""
COHORT = st.sampled_from([2, 10, 100]).flatmap(lambda n: st.fixed_dictionaries(
    {"min_clients": st.just(n), "max_clients": st.sampled_from([n, 2 * n, 1000])},
    optional={"phase_timeout_s": st.sampled_from([1, 30.0]), "formation_timeout_s": st.sampled_from([5, 600.0]),
              "dropout_allowance": st.sampled_from([0.0, 0.3])}))
BASE_PARAMS = {kind.name: [e.params for e in kind.examples] + RICH.get(kind.name, []) for kind in KINDS}


@st.composite
def valid_spec(draw: st.DrawFn) -> dict[str, Any]:
    """A spec of a random registered kind that the server accepts, or refuses only for its privacy or noise plan."""
    kind = draw(st.sampled_from(KINDS))
    params = draw(st.one_of(kind_data(kind).params, st.sampled_from(BASE_PARAMS[kind.name] or [{}])))
    return {"kind": kind.name, "source": draw(st.sampled_from(["words", "examples", "f.1:x-y"])),
            "name": draw(st.none() | st.text(max_size=8)), "params": json.loads(json.dumps(params)),
            "privacy": draw(PRIVACY), "cohort": draw(COHORT)}


def _branch(schema: dict[str, Any], value: Any) -> dict[str, Any] | None:
    """The alternative of an anyOf/oneOf that `value` is an instance of (a tagged object: the one of its tag)."""
    schema = _resolve(schema)
    alternatives = [_resolve(s) for s in schema.get("anyOf", schema.get("oneOf", [schema]))]
    for alt in alternatives:
        shape = alt.get("type")
        if isinstance(value, dict) and (shape == "object" or "properties" in alt):
            tags = {k: p["const"] for k, p in alt.get("properties", {}).items() if "const" in p}
            if all(value.get(k) == v for k, v in tags.items()):
                return alt
        if isinstance(value, list) and shape == "array":
            return alt
    return None


Path = tuple[str | int, ...]


def fields(value: Any, schema: dict[str, Any], path: Path = (), items: int = 10) -> list[tuple[Path, dict[str, Any]]]:
    """Every field `value` has or may have, at any depth, with its schema: each property of each object (present or
    not), and the first `items` entries of each map and items of each list."""
    node = _branch(schema, value)
    out: list[tuple[Path, dict[str, Any]]] = []
    if node is None:
        return out
    if isinstance(value, dict):
        props: dict[str, Any] = node.get("properties", {})
        extra = node.get("additionalProperties")
        entries = [k for k in value if k not in props][:items]  # of a map: the first few
        for key in sorted(set(props) | set(entries)):
            sub = props.get(key, extra if isinstance(extra, dict) else {})
            out.append((path + (key,), sub))
            if isinstance(value.get(key), (dict, list)):
                out += fields(value[key], sub, path + (key,), items)
    elif isinstance(value, list):
        item_schema = node.get("items", {})
        for i, item in enumerate(value[:items]):
            out.append((path + (i,), item_schema))
            if isinstance(item, (dict, list)):
                out += fields(item, item_schema, path + (i,), items)
    return out


def _set(body: Any, path: Path, value: Any) -> Any:
    """A deep copy of `body` with the field at `path` set to `value`."""
    out = json.loads(json.dumps(body))
    node = out
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return out


@st.composite
def mutate(draw: st.DrawFn, body: Any) -> Any:
    """`body` with one field somewhere inside it (a number or text more often than not) set to an edge value or to any
    value around its schema, deleted, joined by an unknown key, or (a list item) duplicated."""
    slots = fields(body, _variant(body))
    if not slots:
        return draw(from_schema(_variant(body)))
    leaves = [s for s in slots if _edges(s[1])]
    on_leaf = bool(leaves) and draw(st.booleans())
    path, sub = draw(st.sampled_from(leaves if on_leaf else slots))
    action = draw(st.sampled_from(["edge", "edge", "edge", "schema", "schema", "delete", "extra"]))
    if action == "edge" and _edges(sub):
        return _set(body, path, draw(st.sampled_from(_edges(sub))))
    if action in ("delete", "extra"):
        out = json.loads(json.dumps(body))
        parent: Any = out
        for part in path[:-1]:
            parent = parent[part]
        if action == "delete" and (isinstance(parent, list) or path[-1] in parent):
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[_extra_key(draw, sorted(parent))] = draw(junk)
        else:
            parent.append(parent[path[-1]])
        return out
    return _set(body, path, draw(from_schema(sub)))


@st.composite
def query_bodies(draw: st.DrawFn) -> Any:
    """A submit body: mostly an accepted spec with 1–3 changes, else one drawn from a kind's schema, or any JSON."""
    how = draw(st.integers(0, 9))
    if how == 0:
        return draw(junk)
    if how <= 2:
        return draw(from_schema(draw(st.sampled_from(sorted(VARIANTS.values(), key=lambda v: v["title"])))))
    body = draw(valid_spec())
    for _ in range(draw(st.integers(1, 3))):
        body = draw(mutate(body))
    return body


# --- the server and the requests ------------------------------------------------------------------------------------


@pytest.fixture
def migrated_url(migrated_template: FilePath, tmp_path: FilePath) -> Iterator[str]:
    """The migrated database (conftest's fixture of that name, overridden) in memory-backed storage where the machine
    has it (/dev/shm): the tests here store hundreds of queries, and on disk their syncs would slow the databases of
    the tests running beside them."""
    shm = FilePath("/dev/shm")
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() and os.access(shm, os.W_OK) else tmp_path) as where:
        path = FilePath(where) / "fa.db"
        shutil.copyfile(migrated_template, path)
        yield f"sqlite+aiosqlite:///{path}"


@pytest.fixture
async def fuzz_server(start_app_server: Callable[..., Awaitable[TestServer]], monkeypatch: pytest.MonkeyPatch) -> TestServer:
    """The app with budgets no run can spend and no limit on active queries, so that every check behind the schema
    stays reachable; accepted queries are stored but never run (nothing here looks at a run, and hundreds of running
    queries would only load the event loop)."""
    srv = await start_app_server(budget_epsilon=1e12, budget_delta=0.5, max_active_queries_per_analyst=100_000)
    monkeypatch.setattr(srv.app[STATE].orchestrator, "spawn", lambda query_id: None)
    return srv


async def _session(srv: TestServer) -> aiohttp.ClientSession:
    token = await srv.app[STATE].store.tokens.create("analyst")
    return aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})


async def _post(http: aiohttp.ClientSession, srv: TestServer, path: str, body: Any) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()  # NaN and ±Infinity as Python writes them
    async with http.post(srv.make_url(path), data=data) as r:
        raw = await r.read()
        try:
            return r.status, json.loads(raw)
        except ValueError:
            return r.status, raw


async def _check(srv: TestServer, http: aiohttp.ClientSession, body: Any, both: bool = True) -> tuple[int, Any]:
    """POST `body` to the preview and, if `both` or the preview accepted it, to submit. Asserts no 5xx, a JSON error
    message on every 4xx, and that submit refuses only what the preview warned of. The last answer."""
    data = json.dumps(body).encode()
    shown = data[:2000].decode(errors="replace")
    verdicts: list[int] = []
    preview: Any = None
    for path in ROUTES:
        if path == "/v1/queries" and not both and verdicts[0] >= 400:
            break
        status, resp = await _post(http, srv, path, data)
        preview = resp if path == "/v1/queries/preview" else preview
        assert status < 500, f"POST {path} answered {status} {resp!r} to {shown}"
        if status >= 400:
            assert isinstance(resp, dict) and isinstance(resp.get("error"), str) and resp["error"], (path, status, resp)
        elif path == "/v1/queries":
            assert status == 201 and isinstance(resp, dict) and resp.get("id"), (status, resp)
        verdicts.append(status)
    if len(verdicts) == 2 and verdicts[0] < 400 <= verdicts[1]:  # only what the preview warned of (budget, quota)
        warned = not preview["budget"]["fits"] or any("would be refused" in w["message"] for w in preview["warnings"])
        assert warned, f"the preview accepted what submit refused ({resp!r}): {shown}"
    return status, resp


FRECENCY_WEIGHTED = rich_spec("training", {**frecency.example_params(rounds=2), "class_weighting": True})
"""Issue 46: class weighting of a black-box model (a 500: `AttributeError` on its `n_classes`)."""
SUBNORMAL_FORMATION = {**rich_spec("histogram", RICH["histogram"][0]), "cohort": {"formation_timeout_s": SUBNORMAL}}
"""Issue 46: a subnormal formation timeout (accepted)."""


async def test_the_schema_drawn_from_is_the_one_served(fuzz_server: TestServer) -> None:
    async with aiohttp.ClientSession() as http, http.get(fuzz_server.make_url("/v1/openapi.json")) as r:
        served = await r.json()
    assert served["paths"]["/v1/queries"]["post"]["requestBody"]["content"]["application/json"]["schema"] == SUBMIT
    assert all(served["components"]["schemas"][name] == schema for name, schema in SCHEMAS.items())


@seed(FUZZ_SEED)
@settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=True, database=None, print_blob=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(body=query_bodies())
@example(body=FRECENCY_WEIGHTED)
@example(body=SUBNORMAL_FORMATION)
async def test_no_generated_body_gets_a_5xx(fuzz_server: TestServer, body: Any) -> None:
    async with await _session(fuzz_server) as http:
        status, _ = await _check(fuzz_server, http, body)
    kind = body.get("kind") if isinstance(body, dict) else None
    event(f"{kind if isinstance(kind, str) and kind in VARIANTS else 'other'}: {status}")


OTHER_FIELD: dict[Path, str] = {("params", "clients_per_round"): "cohort.max_clients"}
"""Fields whose bad values a 422 may blame on the field they conflict with (a round needing more contributors than
a cohort holds names cohort.max_clients, the field to raise)."""


def _named(path: Path, message: str) -> bool:
    """Whether a 422's message names the field at `path`, or the object or list holding it (for a rule between its
    fields or items), by its path (from the body, or from `params` as the kinds write it) or its name."""
    held = path[:-1] if isinstance(path[-1], str) else path[:-2]  # an item of a list: the list's holder
    paths = [path, path[:-1], held] + [p[1:] for p in (path, path[:-1], held) if p[:1] == ("params",)]
    names = {".".join(map(str, p)) for p in paths if p} | {str(p) for p in path[-2:] if isinstance(p, str)}
    return any(n in message for n in names | {OTHER_FIELD.get(path, "")} if n)


@pytest.mark.parametrize("target", sorted(RICH) + ["envelope"])
async def test_every_field_at_its_edges(fuzz_server: TestServer, target: str) -> None:
    """Each rich spec of a kind is accepted; then each of its numeric params (the first two items of a list or map),
    one at a time, at each of its `sweep_values` — for "envelope", the privacy and cohort fields of one histogram
    spec: never a 5xx, and a 422 names the field. Each body has a source of its own (a fresh budget)."""
    specs = [rich_spec(target, params) for params in RICH[target]] if target in RICH else [
        rich_spec("histogram", RICH["histogram"][0])]
    n = 0
    async with await _session(fuzz_server) as http:
        for base in specs:
            status, resp = await _check(fuzz_server, http, base)
            assert status == 201, resp
            for path, schema in fields(base, VARIANTS[base["kind"]], items=2):
                if (path[0] == "params") != (target in RICH):
                    continue
                for value in sweep_values(schema):
                    n += 1
                    body = {**_set(base, path, value), "source": f"sweep-{n}"}
                    status, resp = await _check(fuzz_server, http, body, both=False)
                    if status == 422:
                        assert _named(path, resp["error"]), f"{'.'.join(map(str, path))} = {value!r}: {resp['error']}"


# --- the bad inputs of issue 46, those the tests above found, and the bounds that refuse them -----------------------


async def test_class_weighting_of_a_black_box_model_is_a_422_naming_the_field(fuzz_server: TestServer) -> None:
    message = "needs a model with classes (a black-box model has none)"
    async with await _session(fuzz_server) as http:
        for path in ROUTES:
            status, resp = await _post(http, fuzz_server, path, FRECENCY_WEIGHTED)
            assert status == 422, resp
            assert resp["error"] == f"params.class_weighting: {message}"
            assert resp["detail"] == [{"field": "params.class_weighting", "message": message}]
        linear = _set(FRECENCY_WEIGHTED, ("params",), {"model": {"name": "linear", "n_features": 2}, "rounds": 2,
                                                       "class_weighting": True})
        status, resp = await _post(http, fuzz_server, "/v1/queries", linear)
        assert status == 422 and resp["error"] == "params.class_weighting: needs a model with classes (model 'linear' " \
                                                  "has none)", resp
        # the black-box model without class weighting, and a classifier with it, are accepted
        for params in ({**FRECENCY_WEIGHTED["params"], "class_weighting": False},
                       {"model": {"name": "logistic", "n_features": 2}, "rounds": 2, "class_weighting": True}):
            status, resp = await _check(fuzz_server, http, _set(FRECENCY_WEIGHTED, ("params",), params))
            assert status == 201, resp


@pytest.mark.parametrize(("path", "value"), [
    (("cohort", "formation_timeout_s"), SUBNORMAL),
    (("cohort", "formation_timeout_s"), SMALLEST_NORMAL),
    (("cohort", "formation_timeout_s"), 0.5),
    (("cohort", "formation_timeout_s"), -0.0),
    (("cohort", "formation_timeout_s"), MAX_FORMATION_TIMEOUT_S * 2),
    (("cohort", "phase_timeout_s"), SUBNORMAL),
    (("cohort", "phase_timeout_s"), 0.05),
    (("cohort", "phase_timeout_s"), -0.0),
    (("cohort", "dropout_allowance"), SUBNORMAL),
    (("privacy", "epsilon"), 1e-300),
    (("privacy", "delta"), SMALLEST_NORMAL),  # was a 422 blaming cohort.max_clients ("math domain error")
    (("privacy", "noise_multiplier"), 1e-3),
    (("params", "bound_budget_share"), SUBNORMAL),  # was a 500 (OverflowError in the calibration)
    (("params", "clip_budget_share"), SMALLEST_NORMAL),  # was a 500 too
    (("params", "bins"), 2**53 + 1),
    (("params", "max_examples_limit"), 10**400),
])
async def test_absurd_values_are_422_naming_the_field(fuzz_server: TestServer, path: Path, value: float) -> None:
    body = _set(rich_spec("feature_stats", RICH["feature_stats"][0]), path, value)
    async with await _session(fuzz_server) as http:
        for route in ROUTES:
            status, resp = await _post(http, fuzz_server, route, body)
            assert status == 422 and resp["error"].startswith(".".join(map(str, path)) + ": "), resp


@pytest.mark.parametrize(("path", "value", "message"), [
    # were 500s at submit (the preview accepted them): the spec's canonical JSON, which the transparency log and the
    # devices' task digests hash, holds no integer beyond 2^53 − 1 and no lone surrogate
    (("params", "server_optimizer", "step_max"), 2**53 + 1, "9007199254740993 is beyond ±(2^53 − 1)"),
    (("params", "model", "seed"), 2**62, "4611686018427387904 is beyond ±(2^53 − 1)"),
    (("params", "loss_cap"), 10**30, "an integer of 31 digits is beyond ±(2^53 − 1)"),
    (("params", "model", "factory_option"), "\ud800", "must be valid Unicode text (it holds a lone surrogate)"),
    (("params", "model", "factory_option"), [1, {"x": math.inf}], "must be a finite number"),
    (("params", "model", "l2"), 1e300, "less than or equal to 1000000"),
    (("params", "clip_norm"), 1e-300, "greater than or equal to"),
    (("params", "weight_share"), 1e-12, "greater than or equal to 0.01"),
])
async def test_values_canonical_json_cannot_hold_are_422(fuzz_server: TestServer, path: Path, value: Any,
                                                         message: str) -> None:
    body = _set(rich_spec("training", RICH["training"][1]), path, value)
    async with await _session(fuzz_server) as http:
        for route in ROUTES:
            status, resp = await _post(http, fuzz_server, route, body)
            assert status == 422 and resp["error"].startswith(".".join(map(str, path))) and message in resp["error"], resp


async def test_the_smallest_bounds_are_accepted(fuzz_server: TestServer) -> None:
    body = rich_spec("feature_stats", {**RICH["feature_stats"][0], "bound_budget_share": 0.01, "clip_budget_share": 0.01})
    body["cohort"] |= {"phase_timeout_s": MIN_PHASE_TIMEOUT_S, "formation_timeout_s": MIN_FORMATION_TIMEOUT_S}
    async with await _session(fuzz_server) as http:
        status, resp = await _check(fuzz_server, http, body)
        assert status == 201, resp
        params = {**RICH["training"][1], "clip_norm": 1e-9, "weight_share": 0.01, "model": {
            "name": "logistic", "n_features": 2, "l2": 1e6, "seed": 2**53 - 1}}
        status, resp = await _check(fuzz_server, http, rich_spec("training", params))
        assert status == 201, resp
