"""The `quantiles` kind: medians, tail percentiles and the distribution (CDF) of numeric values held on devices,
from one noisy hierarchical histogram per feature.

One round. For each feature the public domain [lower, upper] is cut into L = b^D equal leaves under a complete
b-ary tree of D levels (branching b, `tree()`); each of a device's examples (at most `max_examples_per_device`,
chosen at random when it holds more) adds 1 to the root, 1 to the node on its leaf's path at every level, and 1
to `below` or `above` when it lay outside the bounds (it is clipped into the edge leaf and counted). The vector
of a feature is [root, level 1 (b), …, level D (b^D), below, above]; the secure sum of those vectors, with the
server's distributed noise on every entry, is the whole release: the tree is post-processed for consistency —
the least-squares estimate that makes every node equal its children's sum (Hay, Rastogi, Miklau and Suciu,
"Boosting the accuracy of differentially private histograms through consistency", VLDB 2010) — and the CDF at
leaf resolution is its leaves' running sum (made non-decreasing by isotonic regression, the least-squares monotone
fit), inverted at each requested quantile.

Branching and depth: a CDF value sums at most (b − 1) nodes per level, and each example touches D + 2 entries
(the noise grows with √(D + 2)), so the rank error's variance grows as (D + 2)·(b − 1)·D for a fixed resolution
L = b^D. `tree()` picks the b in {2, 4, 8, 16} with the least of that over the resolution asked (default 4,096
leaves: b = 4, D = 6); `branching`/`levels` set it by hand (Qardaji, Yang and Li, "Understanding hierarchical methods
for differentially private histograms", VLDB 2013, find b ≈ 16 best for general range queries; for a CDF — prefix
ranges only — smaller b wins by this count, and `make bench` section `quantiles` measures it).

Intervals: the CDF at a leaf edge minus q·N is estimated without bias from the nodes left of the edge and the root
(or the root less the nodes right of it), whose noise variance σ²·(nodes + q²) bounds that of the consistent
estimate (the least-squares estimate has the least variance of all linear unbiased ones). The 95 % interval of the
q-quantile is the set of leaf edges where the CDF is within 1.96 such stds of q·N (widened to whole leaves).

Validity (what a device proves): every entry in [0, m] (m = max_examples), each level adding up to the root (an
example adds exactly one to each), below + above at most the root. A device still chooses its values within the
bounds: its influence on any quantile's rank is at most m.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Protocol, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

from queries.kind import (
    AggregateNoise,
    ExpectedValue,
    KindExample,
    KindTemplate,
    QueryKind,
    QueryKindError,
    Release,
    ReleaseWarning,
    RoundPlan,
    RoundPreview,
    value_path,
)
from queries.rows import cap_rows, numeric_column
from queries.table import Cell, Chart, Column, ResultTable, num_cell
from queries.uncertainty import Z95
from secagg.validity.statement import Ranged, Relation, Statement

# Limits of a quantiles spec (docs/quantiles.md, "Limits").
MAX_FEATURES = 16
MAX_QUANTILES = 99
MAX_NAME_CHARS = 128
MAX_EXAMPLES_PER_DEVICE = 100
MAX_BRANCHING = 64
MAX_LEVELS = 16
MAX_LEAVES = 1 << 16
"""Finest resolution of a feature's tree (its vector has about L·b/(b − 1) entries)."""
MAX_DIM = 1 << 19
"""Most entries of a round's vector over all features."""
DEFAULT_RESOLUTION = 4096
BRANCHINGS = (2, 4, 8, 16)
"""What `tree()` chooses from when the spec does not set `branching`."""
CDF_POINTS = 1024
"""The released CDF has the finest tree level with at most this many nodes (edges: one more)."""

FeatureName = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME_CHARS)]


class QuantileFeature(BaseModel):
    """A numeric feature and its public domain [lower, upper] (values outside are clipped into it and counted)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    name: FeatureName
    lower: float
    upper: float

    @field_validator("lower", "upper", mode="before")
    @classmethod
    def _number(cls, v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError("must be a number")
        return float(v)

    @model_validator(mode="after")
    def _ordered(self) -> QuantileFeature:
        if not self.lower < self.upper or not math.isfinite(self.upper - self.lower):
            raise ValueError(f"lower ({self.lower}) must be below upper ({self.upper})")
        return self


def tree(resolution: int, branching: int | None = None, levels: int | None = None) -> tuple[int, int]:
    """(b, D): the branching and levels of a feature's tree with at least `resolution` leaves (at most MAX_LEAVES).
    Given neither, the b in BRANCHINGS minimising (D + 2)·(b − 1)·D, the rank error's variance up to a common factor
    (ties: the smaller b); given one, the other follows from the resolution."""
    if branching is not None and levels is not None:
        return branching, levels
    if branching is not None:
        return branching, max(1, math.ceil(math.log(resolution) / math.log(branching) - 1e-12))
    if levels is not None:
        return max(2, math.ceil(resolution ** (1 / levels) - 1e-12)), levels

    def cost(b: int) -> tuple[float, int]:
        d = max(1, math.ceil(math.log(resolution) / math.log(b) - 1e-12))
        return (d + 2) * (b - 1) * d, b

    b = min(BRANCHINGS, key=cost)
    return b, max(1, math.ceil(math.log(resolution) / math.log(b) - 1e-12))


class QuantilesParams(BaseModel):
    model_config = ConfigDict(
        extra="forbid", allow_inf_nan=False, strict=True,
        json_schema_extra={"examples": [{"features": [{"name": "startup_ms", "lower": 0, "upper": 10000}],
                                         "quantiles": [0.5, 0.9, 0.99], "max_examples_per_device": 3}]},
    )
    CONTRIBUTION_BOUND: ClassVar[tuple[str, ...]] = ("max_examples_per_device",)

    features: list[QuantileFeature] = Field(min_length=1, max_length=MAX_FEATURES)
    quantiles: list[float] = Field(min_length=1, max_length=MAX_QUANTILES)
    max_examples_per_device: int = Field(default=1, ge=1, le=MAX_EXAMPLES_PER_DEVICE)
    resolution: int = Field(default=DEFAULT_RESOLUTION, ge=2, le=MAX_LEAVES)
    """Leaves of each feature's tree, at least (rounded up to a power of the branching)."""
    branching: int | None = Field(default=None, ge=2, le=MAX_BRANCHING)
    levels: int | None = Field(default=None, ge=1, le=MAX_LEVELS)

    @field_validator("features")
    @classmethod
    def _unique(cls, v: list[QuantileFeature]) -> list[QuantileFeature]:
        seen: set[str] = set()
        for f in v:
            if f.name in seen:
                raise ValueError(f"duplicate feature name {f.name!r}")
            seen.add(f.name)
        return v

    @field_validator("quantiles")
    @classmethod
    def _probabilities(cls, v: list[float]) -> list[float]:
        for i, q in enumerate(v):
            if isinstance(q, bool) or not 0 < q < 1:
                raise ValueError(f"{i}: a quantile must lie strictly between 0 and 1, got {q!r}")
        if len(set(v)) != len(v):
            raise ValueError("quantiles must be distinct")
        return sorted(v)

    @model_validator(mode="after")
    def _fits(self) -> QuantilesParams:
        b, d = self.tree
        if b ** d > MAX_LEAVES:
            raise ValueError(f"resolution: branching {b} over {d} levels makes {b ** d} leaves, more than {MAX_LEAVES}")
        dim = len(self.features) * feature_dim(b, d)
        if dim > MAX_DIM:
            raise ValueError(f"resolution: {len(self.features)} features × {feature_dim(b, d)} entries is {dim}, more "
                             f"than {MAX_DIM}; ask for fewer leaves or features")
        return self

    @property
    def tree(self) -> tuple[int, int]:
        return tree(self.resolution, self.branching, self.levels)


def feature_dim(b: int, d: int) -> int:
    """Entries of one feature's vector: the root, the D levels and below/above."""
    total: int = 3  # the root, below and above
    for level in range(1, d + 1):
        total += b ** level
    return total


class QuantilesTask(BaseModel):
    """The round's task: the features, the tree and the per-device bound on examples."""

    model_config = ConfigDict(extra="forbid", strict=True)

    features: list[QuantileFeature] = Field(min_length=1, max_length=MAX_FEATURES)
    branching: int = Field(ge=2, le=MAX_BRANCHING)
    levels: int = Field(ge=1, le=MAX_LEVELS)
    max_examples: int = Field(ge=1, le=MAX_EXAMPLES_PER_DEVICE)

    @model_validator(mode="after")
    def _fits(self) -> QuantilesTask:
        check_tree_size(len(self.features), self.branching, self.levels)
        return self


def check_tree_size(features: int, branching: int, levels: int) -> None:
    """A tree task's size limits (this kind's and feature_stats' clip round): ValueError naming the field."""
    if branching ** levels > MAX_LEAVES:
        raise ValueError(f"levels: {branching}^{levels} leaves is more than {MAX_LEAVES}")
    if features * feature_dim(branching, levels) > MAX_DIM:
        raise ValueError(f"features: the vector would have more than {MAX_DIM} entries")


def leaf_of(x: np.ndarray, lower: float, upper: float, leaves: int) -> np.ndarray:
    """Each (clipped) value's leaf index in [0, leaves)."""
    pos = (np.clip(x, lower, upper) - lower) / (upper - lower) * leaves
    out: np.ndarray = np.minimum(pos.astype(np.int64), leaves - 1)
    return out


class Bounded(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def lower(self) -> float: ...
    @property
    def upper(self) -> float: ...


class TreeTask(Protocol):
    """What a tree round's task gives the device half: the quantiles kind's `QuantilesTask`, feature_stats'
    clip round."""

    @property
    def features(self) -> Sequence[Bounded]: ...
    @property
    def branching(self) -> int: ...
    @property
    def levels(self) -> int: ...
    @property
    def max_examples(self) -> int: ...


@dataclass(frozen=True)
class QuantilesState:
    done: bool = False
    raw: list[list[int]] = field(default_factory=list)
    """Per feature, its aggregate ([root, levels…, below, above], noisy)."""
    contributors: int = 0
    noise_std: float = 0.0
    """Standard deviation of each entry's noise."""


def consistent(levels: list[np.ndarray], b: int) -> list[np.ndarray]:
    """Hay et al.'s least-squares consistent tree from noisy node counts of equal variance: `levels[0]` the root
    (one entry), `levels[l]` the b^l nodes of level l. Bottom-up weighted averages, then the top-down correction;
    afterwards every node equals the sum of its children."""
    depth = len(levels) - 1
    z = [np.asarray(lv, dtype=np.float64).copy() for lv in levels]
    for level in range(depth - 1, -1, -1):  # height i = depth − level + 1 (leaves have height 1)
        i = depth - level + 1
        kids = z[level + 1].reshape(-1, b).sum(axis=1)
        z[level] = (b ** i - b ** (i - 1)) / (b ** i - 1) * z[level] + (b ** (i - 1) - 1) / (b ** i - 1) * kids
    out = [z[0]]
    for level in range(1, depth + 1):
        kids = z[level].reshape(-1, b)
        fix = (out[level - 1] - kids.sum(axis=1)) / b
        out.append((kids + fix[:, None]).reshape(-1))
    return out


def _digit_sum(k: int, b: int, depth: int) -> int:
    """Nodes in the decomposition of the first k leaves of a b-ary tree of `depth` levels (k ≤ b^depth)."""
    if k >= b ** depth:
        return 1
    total = 0
    while k:
        k, digit = divmod(k, b)
        total += digit
    return total


@functools.lru_cache(maxsize=64)
def _edge_nodes(b: int, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Per leaf edge k = 0 … L: nodes left of it and nodes right of it (the decompositions of [0, k) and [k, L))."""
    leaves = b ** depth
    left = np.array([_digit_sum(k, b, depth) for k in range(leaves + 1)], dtype=np.float64)
    return left, left[::-1].copy()


@dataclass(frozen=True)
class FeatureRelease:
    count: float
    count_std: float
    below: float
    above: float
    edges: np.ndarray
    cdf: np.ndarray
    """Non-decreasing estimate of how many values lie below each leaf edge (edges[0] = lower: 0)."""
    quantiles: dict[float, tuple[float, float, float]]
    """q → (value, 95 % interval low, high)."""


def release_feature(spec: Bounded, raw: np.ndarray, b: int, depth: int, std: float,
                    quantiles: list[float]) -> FeatureRelease:
    """One feature's count, clipped counts, CDF and quantiles from its noisy aggregate."""
    sizes = [b ** level for level in range(depth + 1)]
    cuts = np.cumsum(sizes)
    parts = np.split(np.asarray(raw, dtype=np.float64), cuts)
    levels, (below, above) = parts[:depth + 1], parts[depth + 1]
    tree_ = consistent(levels, b) if std > 0 else levels
    total = max(float(tree_[0][0]), 0.0)
    leaves = b ** depth
    edges = np.linspace(spec.lower, spec.upper, leaves + 1)
    cdf = np.concatenate([[0.0], np.cumsum(tree_[depth])])
    if std > 0:  # the least-squares non-decreasing fit (a running maximum would push a noisy tail up)
        from scipy.optimize import isotonic_regression  # server side only: devices never decode

        cdf = isotonic_regression(cdf).x
    cdf = np.clip(cdf, 0.0, total)
    left, right = _edge_nodes(b, depth)
    # the root's own noise after consistency (it averages the D + 1 level sums with weights): at most σ
    count_std = std * math.sqrt((b - 1) / (b ** (depth + 1) - 1) * b ** depth) if std > 0 else 0.0
    out: dict[float, tuple[float, float, float]] = {}
    for q in quantiles:
        target = q * total
        k = int(np.searchsorted(cdf, target, side="left"))  # first edge with cdf ≥ target
        k = min(max(k, 1), leaves)
        lo_c, hi_c = cdf[k - 1], cdf[k]
        frac = 0.5 if hi_c <= lo_c else (target - lo_c) / (hi_c - lo_c)
        value = float(edges[k - 1] + min(max(frac, 0.0), 1.0) * (edges[k] - edges[k - 1]))
        if std > 0:
            s = std * np.sqrt(np.minimum(left + q * q, right + (1 - q) ** 2))
            reach = np.flatnonzero(cdf + Z95 * s >= target)
            sure = np.flatnonzero(cdf - Z95 * s >= target)
            k_lo = int(reach[0]) if reach.size else leaves
            k_hi = int(sure[0]) if sure.size else leaves
            low = float(edges[max(k_lo - 1, 0)])
            high = float(edges[k_hi])
            out[q] = (value, min(low, value), max(high, value))
        else:
            out[q] = (value, value, value)
    return FeatureRelease(total, count_std, max(float(below), 0.0), max(float(above), 0.0), edges, cdf, out)


def tree_sensitivity(t: TreeTask) -> tuple[float, float]:
    """Per example and feature at most D + 2 entries get 1 (root, one node per level, below or above): with m
    examples, L1 m·F·(D + 2) and L2 m·√(F·(D + 2)) (all m on one path)."""
    per = len(t.features) * (t.levels + 2)
    return float(t.max_examples * per), float(t.max_examples * math.sqrt(per))


def tree_vector(t: TreeTask, rows: list[Any], rng: np.random.Generator) -> np.ndarray:
    """A device's vector for a tree task (the quantiles kind's round, feature_stats' clip round): per feature
    [root, level 1 … level D, below, above] over at most `max_examples` of its rows."""
    b, d = t.branching, t.levels
    leaves = b ** d
    kept = cap_rows(rows, t.max_examples, rng)
    out = []
    for spec in t.features:
        x = numeric_column(kept, spec.name)
        x = x[~np.isnan(x)]
        vec = np.zeros(feature_dim(b, d), dtype=np.int64)
        vec[0] = len(x)
        leaf = leaf_of(x, spec.lower, spec.upper, leaves)
        offset = 1
        for level in range(1, d + 1):
            np.add.at(vec, offset + leaf // (b ** (d - level)), 1)
            offset += b ** level
        vec[offset] = int(np.sum(x < spec.lower))
        vec[offset + 1] = int(np.sum(x > spec.upper))
        out.append(vec)
    return np.concatenate(out)


def tree_statement(t: TreeTask) -> Statement:
    """Per feature: every entry in [0, m]; each level adds up to the root; below + above at most the root."""
    b, d, m = t.branching, t.levels, t.max_examples
    segments: list[Ranged] = []
    relations: list[Relation] = []
    base = 0
    for _ in t.features:
        segments.append(Ranged(1, 0, m))
        offset = base + 1
        for level in range(1, d + 1):
            size = b ** level
            segments.append(Ranged(size, 0, m))
            relations.append(Relation(tuple((offset + i, 1) for i in range(size)) + ((base, -1),), 0, 0))
            offset += size
        segments.append(Ranged(2, 0, m))
        relations.append(Relation(((offset, 1), (offset + 1, 1), (base, -1)), -m, 0))
        base = offset + 2
    return Statement(tuple(segments), relations=tuple(relations))


def _q_key(q: float) -> str:
    """A quantile's key in the result: its shortest decimal ("0.5", "0.99")."""
    return repr(float(q))


QUANTILES_TEMPLATE = KindTemplate(
    "quantiles: medians, tail percentiles and the CDF of a numeric value on devices (a noisy hierarchical "
    "histogram per feature)",
    {
        "kind": "quantiles",
        "name": "start-up time percentiles",
        "source": "startup",
        "params": {"features": [{"name": "startup_ms", "lower": 0, "upper": 10000}],
                   "quantiles": [0.5, 0.9, 0.99], "max_examples_per_device": 3},
        "privacy": {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6},
        "cohort": {"min_clients": 100, "max_clients": 1000, "phase_timeout_s": 120},
    },
    {
        "params.features": "each value's public range: values outside are clipped into it and counted",
        "params.quantiles": "the probabilities to answer, strictly between 0 and 1",
        "params.max_examples_per_device": "values one device may contribute (chosen at random beyond it): "
                                          "bounds its influence; the noise grows with it",
        "params.resolution": "leaves of the tree (default 4,096): the finest step of the CDF",
    },
)
"""Starter spec of `fa init quantiles` (queries.templates)."""


class QuantilesKind(QueryKind[QuantilesParams, QuantilesState]):
    name = "quantiles"
    supports_proofs = True
    Params = QuantilesParams
    State = QuantilesState
    Task = QuantilesTask
    examples = (KindExample({"features": [{"name": "startup_ms", "lower": 0, "upper": 1000}], "quantiles": [0.5, 0.9],
                             "max_examples_per_device": 2, "resolution": 64},
                            [{"startup_ms": 120.0}, {"startup_ms": 1500.0}, {"startup_ms": None}]),)
    template = QUANTILES_TEMPLATE

    def initial_state(self, params: QuantilesParams) -> QuantilesState:
        return QuantilesState()

    def plan_round(self, params: QuantilesParams, state: QuantilesState, round_index: int) -> RoundPlan | None:
        if state.done:
            return None
        b, d = params.tree
        task = QuantilesTask(features=params.features, branching=b, levels=d,
                             max_examples=params.max_examples_per_device)
        l1, l2 = self.task_sensitivity(task)
        return RoundPlan(round=round_index, task=self.task_json(task), dim=len(params.features) * feature_dim(b, d),
                         max_abs=params.max_examples_per_device, l1_sensitivity=l1, l2_sensitivity=l2)

    def task_sensitivity(self, task: QuantilesTask) -> tuple[float, float]:
        return tree_sensitivity(task)

    def contribute(self, task: QuantilesTask, rows: list[Any], rng: np.random.Generator) -> np.ndarray:
        return tree_vector(task, rows, rng)

    def validity(self, task: QuantilesTask) -> Statement:
        return tree_statement(task)

    def decode_round(
        self,
        params: QuantilesParams,
        state: QuantilesState,
        plan: RoundPlan,
        aggregate: np.ndarray,
        contributors: int,
        noise: AggregateNoise | None = None,
    ) -> QuantilesState:
        agg = np.asarray(aggregate, dtype=np.int64)
        if agg.shape != (plan.dim,):
            raise QueryKindError(f"aggregate: expected length {plan.dim}, got {agg.shape}")
        per = feature_dim(*params.tree)
        raw = [agg[j * per:(j + 1) * per].tolist() for j in range(len(params.features))]
        return QuantilesState(done=True, raw=raw, contributors=contributors,
                              noise_std=0.0 if noise is None else float(noise.std))

    def preview(self, params: QuantilesParams, rounds: list[RoundPreview]) -> tuple[list[ExpectedValue], list[ReleaseWarning]]:
        """The count's noise, and for each quantile the std of its rank error (in values counted, not in the feature's
        units, which depend on the data) at the median edge of the tree."""
        if not rounds:
            return [], []
        std = rounds[0].std
        b, d = params.tree
        values: list[ExpectedValue] = []
        warnings: list[ReleaseWarning] = []
        if std <= 0:
            return values, warnings
        left, right = _edge_nodes(b, d)
        mid = (b ** d) // 2
        n = max(rounds[0].contributors, 1)
        for spec in params.features:
            count_std = std * math.sqrt((b - 1) / (b ** (d + 1) - 1) * b ** d)
            values.append(ExpectedValue(value_path("features", spec.name, "count"), count_std))
            for q in params.quantiles:
                rank = std * math.sqrt(min(left[mid] + q * q, right[mid] + (1 - q) ** 2))
                values.append(ExpectedValue(value_path("features", spec.name, "quantiles", _q_key(q)), rank,
                                            "the std of the quantile's rank error, in values counted (its std in the "
                                            "feature's units depends on how dense the values are there)"))
                if Z95 * rank > 0.05 * n:
                    warnings.append(ReleaseWarning(value_path("features", spec.name, "quantiles", _q_key(q)),
                        f"the {q:g}-quantile's rank is expected to be off by up to ±{Z95 * rank:.4g} values (95 %), more "
                        f"than 5 % of the values if each of the {n} devices holds one: raise privacy.epsilon or include "
                        "more devices"))
        return values, warnings

    def finalize(self, params: QuantilesParams, state: QuantilesState, stop_reason: str | None = None) -> Release:
        b, d = params.tree
        features: dict[str, Any] = {}
        noise_std: dict[str, float] = {}
        intervals: dict[str, tuple[float, float]] = {}
        warnings: list[ReleaseWarning] = []
        if not state.done:
            return Release({"features": {}, "clients": 0, "tree": {"branching": b, "levels": d}}, warnings=[
                ReleaseWarning(None, f"the query stopped before its round ({stop_reason or 'interrupted'}): nothing released")])
        cdf_level = max(level for level in range(d + 1) if b ** level <= CDF_POINTS)
        step = b ** (d - cdf_level)
        for spec, raw in zip(params.features, state.raw):
            rel = release_feature(spec, np.asarray(raw), b, d, state.noise_std, params.quantiles)
            path = functools.partial(value_path, "features", spec.name)
            total = rel.count
            entry: dict[str, Any] = {
                "count": int(round(total)),
                "quantiles": {_q_key(q): v for q, (v, _, _) in rel.quantiles.items()},
                "ci95": {_q_key(q): [lo, hi] for q, (_, lo, hi) in rel.quantiles.items()},
                "clipped_below": int(round(rel.below)),
                "clipped_above": int(round(rel.above)),
                "lower": spec.lower,
                "upper": spec.upper,
                "cdf": {"edges": rel.edges[::step].tolist(),
                        "fraction": (rel.cdf[::step] / total if total > 0 else rel.cdf[::step] * 0).round(6).tolist()},
            }
            features[spec.name] = entry
            if state.noise_std > 0:
                noise_std[path("count")] = rel.count_std
                for key in ("clipped_below", "clipped_above"):  # one noisy entry each, released at ≥ 0
                    noise_std[path(key)] = state.noise_std
                    intervals[path(key)] = (max(0.0, entry[key] - Z95 * state.noise_std), entry[key] + Z95 * state.noise_std)
                left, right = _edge_nodes(b, d)
                for i, k in enumerate(range(0, b ** d + 1, step)):  # the released CDF's points
                    frac = float(rel.cdf[k] / total) if total > 0 else 0.0
                    sd = state.noise_std * math.sqrt(min(left[k] + frac * frac, right[k] + (1 - frac) ** 2)) / max(total, 1.0)
                    noise_std[path("cdf", "fraction", i)] = max(sd, 1e-12)
                    intervals[path("cdf", "fraction", i)] = (max(0.0, frac - Z95 * sd), min(1.0, frac + Z95 * sd))
                for q, (v, lo, hi) in rel.quantiles.items():
                    p = path("quantiles", _q_key(q))
                    noise_std[p] = max((hi - lo) / (2 * Z95), 1e-12 * (spec.upper - spec.lower))
                    intervals[p] = (lo, hi)
            for q, (v, lo, hi) in rel.quantiles.items():
                if q * total < rel.below or (1 - q) * total < rel.above:
                    side = "lower" if q * total < rel.below else "upper"
                    warnings.append(ReleaseWarning(path("quantiles", _q_key(q)),
                        f"the {q:g}-quantile lies among the values clipped at {side} ({entry['clipped_below' if side == 'lower' else 'clipped_above']} "
                        f"of {entry['count']}): it is at most a bound, not the value — widen the feature's {side}"))
        result = {"features": features, "clients": int(state.contributors), "tree": {"branching": b, "levels": d,
                                                                                     "leaves": b ** d}}
        advice = ("raise privacy.epsilon, lower max_examples_per_device, ask for a coarser resolution, or include more "
                  "devices (cohort.min_clients)")
        auxiliary = ("/tree", *(value_path("features", f.name, k) for f in params.features for k in ("cdf", "ci95")))
        return Release(result, noise_std=noise_std, intervals=intervals, warnings=warnings, advice=advice,
                       auxiliary=auxiliary)

    def tabulate(self, result: dict[str, Any]) -> list[ResultTable]:
        """Per feature: its quantiles (with count and clipped counts in the caption), then its CDF (a line chart)."""
        tables: list[ResultTable] = []
        if not result.get("features"):
            return [ResultTable("quantiles", None, (Column("quantile", "quantile", "key"), Column("value", "value", "value")),
                                empty="Nothing released: the query stopped before its round.")]
        for name, f in result["features"].items():
            rows = tuple({"quantile": Cell(float(q)), "value": num_cell(v, "features", name, "quantiles", q)}
                         for q, v in f["quantiles"].items())
            caption = (f"{f['count']} values from {result.get('clients')} devices; clipped below {f['lower']:g}: "
                       f"{f['clipped_below']}, above {f['upper']:g}: {f['clipped_above']}")
            tables.append(ResultTable(f"quantiles:{name}", name, (Column("quantile", "quantile", "key"),
                                                                   Column("value", "value", "value")), rows,
                                      None, caption))
            cdf = f.get("cdf") or {}
            edges, frac = cdf.get("edges") or [], cdf.get("fraction") or []
            stride = max(1, (len(edges) - 1) // 64)
            points: list[tuple[float, dict[str, Cell]]] = [
                (edges[i], {"x": Cell(edges[i]), "cdf": num_cell(frac[i], "features", name, "cdf", "fraction", i),
                            "quantile": Cell(None)}) for i in range(0, len(edges), stride)]
            for q, v in f["quantiles"].items():  # a marker at each requested quantile, on the curve
                points.append((v, {"x": Cell(v), "cdf": Cell(float(np.interp(v, edges, frac)) if edges else None),
                                   "quantile": Cell(float(q))}))
            points.sort(key=lambda p: p[0])
            caption = "the released CDF" + (f" (every {stride}th point of {len(edges)})" if stride > 1 else "") + \
                      "; the dots are the requested quantiles"
            tables.append(ResultTable(f"cdf:{name}", f"{name}: CDF", (Column("x", name, "key"),
                                                                      Column("cdf", "fraction below", "value"),
                                                                      Column("quantile", "requested quantile", "value")),
                                      tuple(row for _, row in points), Chart("line", "x", ("cdf", "quantile")), caption))
        return tables
