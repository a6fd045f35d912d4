"""The `feature_stats` query kind: federated count, mean, variance and standard deviation per feature,
with optional equal-width histograms, for global feature scaling (Fritsch, Halder, Hartmann, Petukhov,
"Federated Learning: Collaborative Machine Learning without Centralized Training Data", TUM Data
Innovation Lab 2018, §4.1 and §5.3.2).

Rounds (docs/feature_stats.md):
  [row counts]    only when the analyst leaves `max_examples_per_device` unset: every device votes for the
                  bucket of a log-spaced grid that holds its number of rows (one-hot, sensitivity 1), with a
                  small declared share of the query's privacy budget (`bound_budget_share`); the bound is
                  chosen from this noisy histogram (`choose_bound`);
  first moments   per feature the count of present values and the centred Σ (2·(x − lower)/range − 1) → the
                  global mean (centring halves the moment's sensitivity in the feature's units, and a mean near
                  mid-range gets almost nothing of the count's noise);
  second moments  per feature Σ ((x − mean)/range)² / b, with b = max(mean − lower, upper − mean)²/range² the
                  largest value one example can give once the mean is known (so the noise shrinks by b), and
                  the optional histogram bins → the variance; with validity proofs and no bins, one bin per
                  feature (its count, `count_second_round`), which ties the second moment to the rows.
The privacy budget is split between the rounds by `queries.kind.RoundPlan.privacy_weight` (shares
`means_share` (default `MEANS_SHARE`) / the rest between the moment rounds, after the bound's share).

Encoding. Every entry is in units of 2^K per example, so all coordinates share one scale: a count entry adds
2^K per present value, the other entries 2^K·(a fraction in [0, 1]) rounded stochastically (unbiased). K is
chosen from the bound on examples per device so that one device's entries stay below 2^46 and a cohort of up
to 2^15 devices fits the 62-bit ring (≈1e-12 relative rounding error); noisy queries use K = 16.

Post-processing (the released numbers are functions of the noisy sums only): counts and bins are never
negative and the bins add up to the count (inverse-variance combination of the count with the bins' sum,
then the bins projected onto that total; the single count bin of `count_second_round` is combined the same way
but not released); means are clamped to [lower, upper]; a variance that the noise
drives below its floor is released at the floor and flagged (`var_floored`), never as a silent 0. Every
released noisy value carries its noise std and 95 % interval (`Release.noise_std`, `Release.intervals`).

Missing values (absent, None, NaN, ±inf, non-numeric) are counted as missing, never as zero.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, RootModel, field_validator, model_validator

from queries.kind import (
    KindExample,
    KindTemplate,
    AggregateNoise,
    ExpectedValue,
    QueryKind,
    QueryKindError,
    Release,
    ReleaseWarning,
    RoundPlan,
    RoundPreview,
    value_path,
)
from queries.layout import Layout
from queries.quantiles import MAX_BRANCHING as TREE_MAX_BRANCHING
from queries.quantiles import MAX_DIM as TREE_MAX_DIM
from queries.quantiles import MAX_LEVELS as TREE_MAX_LEVELS
from queries.quantiles import check_tree_size, feature_dim, release_feature, tree, tree_sensitivity, tree_statement, tree_vector
from queries.release import release_threshold
from queries.rows import cap_rows, numeric_column
from queries.spec import PrivacySpec
from queries.table import Cell, Chart, Column, ResultTable, num_cell
from queries.uncertainty import Z95, fmt, interval
from secagg.validity.statement import Bits, Ranged, Relation, Statement

# Limits of a feature_stats spec (docs/feature_stats.md, "Limits"): the second round's vector has
# len(features)·(1 + bins) ≤ 1,001,000 entries.
MAX_FEATURES = 1000
MAX_BINS = 1000
MAX_NAME_CHARS = 128
MAX_EXAMPLES_PER_DEVICE = 100_000
MAX_MIN_COUNT = 10**12

DEVICE_BOUND_BITS = 46
NOISY_PRECISION_BITS = 16
"""Fixed-point bits per example under DP noise: the noise (≥ one example's worth) dwarfs a 2^-16 rounding
step, and a 2^40-wide unit would push the devices' noise shares beyond what the samplers accept."""
CLIP_RESOLUTION = 1024
"""Leaves of the clip round's tree per feature (`clip_at`): the clip bound is a leaf edge, within 1/1024 of the
range above the quantile."""
CLIP_BUDGET_SHARE = 0.2
MEANS_SHARE = 0.6
"""Default `means_share`: the moment rounds' privacy budget spent on the first moments (counts and means); the
second moments (variances, histograms) get the rest."""
BOUND_FALSE_RATE = 0.01
"""Chance that any empty bucket of the row-count histogram passes its threshold (is taken as evidence)."""
DEFAULT_BOUND_LIMIT = 100
"""Largest bound the data may choose unless `max_examples_limit` says otherwise."""
MIN_BUDGET_SHARE = 0.01
"""Smallest `bound_budget_share` / `clip_budget_share`: a round with a share s of the budget has 1/√s times the noise of
one with all of it (10× at 1 %); far smaller shares only make that round's noise unusable (and a subnormal one
overflows the calibration)."""


class FeatureSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    lower: float
    upper: float

    @field_validator("lower", "upper")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("must be a finite number")
        return v

    @model_validator(mode="after")
    def _ordered(self) -> FeatureSpec:
        if not self.lower < self.upper:
            raise ValueError(f"lower ({self.lower}) must be below upper ({self.upper})")
        if not math.isfinite(self.upper - self.lower):
            raise ValueError(f"upper − lower must be a finite number, got {self.upper} − ({self.lower})")
        return self


class FeatureStatsParams(BaseModel):
    model_config = ConfigDict(
        extra="forbid", allow_inf_nan=False, strict=True,
        json_schema_extra={"examples": [{"features": [{"name": "age", "lower": 0, "upper": 100}], "bins": 10}]},
    )
    CONTRIBUTION_BOUND: ClassVar[tuple[str, ...]] = ("precision_bits", "max_examples_per_device", "max_examples_limit")
    """Params that bound one device's vector (named when a noise plan does not fit the devices)."""

    features: list[FeatureSpec] = Field(min_length=1, max_length=MAX_FEATURES)
    bins: int | None = Field(default=None, ge=1, le=MAX_BINS)
    max_examples_per_device: int | None = Field(default=None, ge=1, le=MAX_EXAMPLES_PER_DEVICE)
    """Rows one device contributes at most (a uniform sample of them when it holds more). Unset: chosen from
    the data by a first, private round (see the module docstring), at most `max_examples_limit`."""
    max_examples_limit: int = Field(default=DEFAULT_BOUND_LIMIT, ge=1, le=MAX_EXAMPLES_PER_DEVICE)
    """Largest bound the data-driven choice may pick (only without `max_examples_per_device`)."""
    bound_budget_share: float = Field(default=0.1, ge=MIN_BUDGET_SHARE, le=0.5)
    """Share of the query's privacy budget spent on choosing the bound, in [0.01, 0.5] (only without
    `max_examples_per_device`); in zero-concentrated terms, the share of ρ."""
    means_share: float = Field(default=MEANS_SHARE, ge=0.1, le=0.95)
    """Share of the moment rounds' budget spent on the first moments (counts and means); the variances and bins get
    the rest. Raise it when the means matter most (0.85 brings a mean's error within 1.5× of a central Gaussian's
    that releases only the means, at 1.6× the variance's noise of the default), lower it for variances."""
    min_count: int = Field(default=1, ge=0, le=MAX_MIN_COUNT)
    """Features with fewer (noisy) present values are suppressed and listed."""
    precision_bits: int | None = Field(default=None, ge=8, le=40)
    """Fixed-point unit 2^precision_bits per example instead of the widest that fits. Set to
    `NOISY_PRECISION_BITS` at submit for noisy queries (see `bind_privacy`)."""
    clip_at: float | None = Field(default=None, gt=0.5, lt=1)
    """Clip each feature's upper bound at its federated `clip_at`-quantile (e.g. 0.99) before the moments: one more
    round, first (after the bound's), a hierarchical histogram of each feature over [lower, upper] as the quantiles
    kind's (`CLIP_RESOLUTION` leaves), with `clip_budget_share` of the budget; the moment rounds then use [lower, the
    upper edge of the quantile's leaf]. The preprocessing of outliers before scaling."""
    clip_budget_share: float = Field(default=CLIP_BUDGET_SHARE, ge=MIN_BUDGET_SHARE, le=0.5)
    """Share of the query's privacy budget the clip round spends, in [0.01, 0.5] (only with `clip_at`)."""
    count_second_round: bool = False
    """Without `bins`, the second round also carries one bin per feature — its count — so that round's validity
    statement ties the second moment to the rows (at most the bins' sum): a device cannot claim second moments
    without rows. Costs √2 in the second round's L2 sensitivity (the variances' noise), and gives the count a second
    estimate (combined with the first round's by inverse variance). No histogram is released for it. Set at submit
    when the query runs with validity proofs (`privacy.validation` not "none", see `bind_privacy`)."""

    @field_validator("features")
    @classmethod
    def _unique(cls, v: list[FeatureSpec]) -> list[FeatureSpec]:
        seen: set[str] = set()
        dupes = sorted({f.name for f in v if f.name in seen or seen.add(f.name)})  # type: ignore[func-returns-value]
        if dupes:
            raise ValueError(f"duplicate feature names: {', '.join(dupes[:10])}")
        return v

    @model_validator(mode="after")
    def _clip_fits(self) -> FeatureStatsParams:
        if self.clip_at is None:
            return self
        b, d = tree(CLIP_RESOLUTION)
        if len(self.features) * feature_dim(b, d) > TREE_MAX_DIM:
            raise ValueError(f"clip_at: the clip round's vector would have {len(self.features) * feature_dim(b, d)} "
                             f"entries ({len(self.features)} features), more than {TREE_MAX_DIM}; clip fewer features")
        if self.bound_from_data and self.bound_budget_share + self.clip_budget_share > 0.8:
            raise ValueError("clip_budget_share: with bound_budget_share it leaves less than 20 % for the moments")
        return self

    @property
    def rounds(self) -> int:
        """Rounds the query runs: [the bound's], [the clip's], first moments, second moments."""
        return 2 + self.bound_from_data + (self.clip_at is not None)

    @property
    def first_moments_index(self) -> int:
        """Index of the first-moments round among `weights()`."""
        return self.rounds - 2

    @property
    def second_round_bins(self) -> int:
        """Bins per feature the second round carries: the analyst's, else one (the count) when
        `count_second_round`, else none."""
        return self.bins or (1 if self.count_second_round else 0)

    @property
    def bound_from_data(self) -> bool:
        return self.max_examples_per_device is None

    @property
    def largest_bound(self) -> int:
        """The analyst's bound, or the most the data-driven choice may pick."""
        return self.max_examples_limit if self.max_examples_per_device is None else self.max_examples_per_device

    def scale_exp_for(self, bound: int) -> int:
        """K for a bound of `bound` examples per device."""
        widest = DEVICE_BOUND_BITS - math.ceil(math.log2(bound + 1))
        return widest if self.precision_bits is None else min(widest, self.precision_bits)

    @property
    def scale_exp(self) -> int:
        """K at the largest bound the query may use."""
        return self.scale_exp_for(self.largest_bound)

    def weights(self) -> list[float]:
        """Privacy weight of each round in order (unit rounds; they sum to the number of rounds): the bound's and the
        clip's their shares, the moment rounds the rest split by `means_share`."""
        shares = ([self.bound_budget_share] if self.bound_from_data else []) + \
                 ([self.clip_budget_share] if self.clip_at is not None else [])
        rest = 1 - sum(shares)
        shares += [rest * self.means_share, rest * (1 - self.means_share)]
        return [self.rounds * share for share in shares]


def bound_grid(limit: int) -> list[int]:
    """Candidate bounds: 1, 2, 3, 4, 6, 8, 11, 16, 23, … (powers of √2 rounded), ending at `limit`."""
    grid: list[int] = []
    k = 0
    while True:
        g = round(2 ** (k / 2))
        if g >= limit:
            break
        if not grid or g > grid[-1]:
            grid.append(g)
        k += 1
    return grid + [limit]


def _stochastic_round(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    low = np.floor(x)
    rounded: np.ndarray = (low + (rng.random(x.shape) < x - low)).astype(np.int64)
    return rounded


def row_counts_layout(grid_size: int) -> Layout:
    """Round 0 (bound from the data): one-hot over the grid's buckets of rows per device, the last one for
    devices above the largest candidate (the limit)."""
    return Layout.of(devices=grid_size + 1)


def first_moments_layout(n_features: int) -> Layout:
    """First moments: per feature its count, then its first moment."""
    return Layout.of(counts=n_features, firsts=n_features)


def second_moments_layout(n_features: int, bins: int) -> Layout:
    """Second moments: per feature its scaled second moment about the global mean, then its `bins` histogram
    counts (feature-major; one bin is the feature's count)."""
    return Layout.of(seconds=n_features, histograms=(n_features, bins))


def project_to_total(values: np.ndarray, total: float) -> np.ndarray:
    """The closest (Euclidean) non-negative vector summing to `total` (0 when total ≤ 0): the projection onto
    the scaled simplex (sort, find the shift, clip)."""
    v = np.asarray(values, dtype=np.float64)
    if total <= 0 or v.size == 0:
        return np.zeros_like(v)
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - total
    idx = np.arange(1, v.size + 1)
    rho = int(np.nonzero(u - css / idx > 0)[0][-1])
    projected: np.ndarray = np.maximum(v - css[rho] / (rho + 1), 0.0)
    return projected


def integer_parts(values: np.ndarray) -> np.ndarray:
    """Non-negative values with an integer sum → integers with the same sum (largest remainders round up)."""
    v = np.maximum(np.asarray(values, dtype=np.float64), 0.0)
    base = np.floor(v + 1e-9)
    short = int(round(float(v.sum()) - float(base.sum())))
    if short > 0:
        base[np.argsort(-(v - base), kind="stable")[:short]] += 1
    return base.astype(np.int64)


@dataclass(frozen=True)
class BoundChoice:
    """The data-driven bound and what it costs: devices holding more rows, and the rows they lose."""

    index: int
    bound: int
    evidence: bool
    """False when no bucket's noisy count passed its threshold (the limit is used)."""
    devices_over: float
    """Devices in the buckets above the bound that rose above their noise (the estimate the choice used)."""
    devices_over_std: float
    """Noise std of the sum of the buckets above the bound (before thresholding)."""
    rows_clipped: float
    rows_clipped_std: float


def choose_bound(grid: list[int], counts: np.ndarray, threshold: float, bucket_std: float, row_std: float) -> BoundChoice:
    """The candidate g_j minimising the estimated mean-squared error of the total row count: rows the bound
    would clip (from the noisy histogram, buckets below `threshold` taken as empty) squared, plus the noise
    variance (row_std·g_j)² that bound implies in the first-moment round — the bias–variance trade-off of
    Amin, Kulesza, Muñoz Medina, Vassilvitskii, "Bounding User Contributions: A Bias-Variance Trade-off in
    Differential Privacy" (ICML 2019). `counts` has one bucket per candidate — bucket k holds the devices with
    g_{k−1} < rows ≤ g_k, taken to hold its midpoint — and one more for the devices above the limit (taken
    to hold limit + 1 rows: their clipped rows are a lower bound). Without evidence (no bucket passes) the
    limit is chosen: nothing is clipped that could not be seen."""
    c = np.asarray(counts, dtype=np.float64)
    g = np.asarray(grid, dtype=np.float64)
    lows = np.concatenate([[1.0], g[:-1] + 1])
    mids = np.concatenate([(lows + g) / 2, [g[-1] + 1]])
    seen = np.where(c >= threshold, c, 0.0)
    last = len(grid) - 1
    if not np.any(seen > 0):
        j = last
    else:
        cost = [float(np.sum(seen[k + 1:] * (mids[k + 1:] - g[k])) ** 2 + (row_std * g[k]) ** 2) for k in range(len(grid))]
        j = int(np.argmin(cost))
    over = mids[j + 1:] - g[j]
    return BoundChoice(
        index=j, bound=int(grid[j]), evidence=bool(np.any(seen > 0)),
        devices_over=float(seen[j + 1:].sum()), devices_over_std=bucket_std * math.sqrt(len(c) - 1 - j),
        rows_clipped=float(np.dot(seen[j + 1:], over)), rows_clipped_std=bucket_std * float(np.linalg.norm(over)),
    )


@dataclass(frozen=True)
class FeatureStatsState:
    stage: int = 0
    """0: before the first moments; 1: counts and means known; 2: variances known (finished)."""
    bound: int | None = None
    """Examples per device used by the moment rounds (None until chosen from the data)."""
    bound_choice: dict[str, Any] | None = None
    """How the bound was chosen from the data (`BoundChoice` fields, the noisy histogram and its noise std)."""
    clip_uppers: list[float] | None = None
    """With `clip_at`: per feature the upper bound the moment rounds use (None until the clip round decoded)."""
    clip_choice: list[dict[str, Any]] | None = None
    """With `clip_at`: per feature the noisy quantile, its 95 % interval and the bound taken."""
    counts: list[float] = field(default_factory=list)
    """Per feature, the (noisy) number of present values."""
    means: list[float | None] = field(default_factory=list)
    """Per feature, the global mean, or None when suppressed (too few values)."""
    firsts: list[float] = field(default_factory=list)
    """Per feature, the (noisy) centred first moment Σ (2·(x − lower)/range − 1)."""
    histograms: list[list[float]] | None = None
    """Per feature, the second round's (noisy) bins: the analyst's histogram, or one bin (the count) with
    `count_second_round`; None when the round carried none."""
    seconds: list[float] = field(default_factory=list)
    """Per feature, the (noisy) sum of ((x − mean)/range)² (already multiplied back by b)."""
    vars: list[float | None] = field(default_factory=list)
    contributors: list[int] = field(default_factory=list)
    noise_std: list[float] = field(default_factory=list)
    """Per moment round, the standard deviation of each entry's noise, in examples (0 without noise)."""


MAX_GRID = 10_000
"""Most buckets of a row-count round's grid (`bound_grid` of the largest `max_examples_limit` has ~35)."""
MAX_SCALE_EXP = DEVICE_BOUND_BITS


class RowCountsTask(BaseModel):
    """The row-count round (bound chosen from the data): the increasing grid of candidate bounds."""

    model_config = ConfigDict(extra="forbid", strict=True)

    stage: Literal["row_counts"]
    grid: list[Annotated[int, Field(ge=1, le=MAX_EXAMPLES_PER_DEVICE)]] = Field(min_length=1, max_length=MAX_GRID)

    @model_validator(mode="after")
    def _increasing(self) -> RowCountsTask:
        if any(b <= a for a, b in zip(self.grid, self.grid[1:])):
            raise ValueError("grid: bounds must be increasing")
        return self


class MomentsTask(BaseModel):
    """What both moment rounds carry: the features, the fixed-point scale 2^scale_exp and the examples bound."""

    model_config = ConfigDict(extra="forbid", strict=True)

    features: list[FeatureSpec] = Field(min_length=1, max_length=MAX_FEATURES)
    scale_exp: int = Field(ge=0, le=MAX_SCALE_EXP)
    max_examples: int = Field(ge=1, le=MAX_EXAMPLES_PER_DEVICE)


class FirstMomentsTask(MomentsTask):
    """The first-moments round. `first_moment` names the encoding, so a device built for another refuses the task
    instead of sending sums the server would misread: "centred" is Σ (2·(x − lower)/range − 1), in [−count, count]."""

    stage: Literal["first_moments"]
    first_moment: Literal["centred"]


class SecondMomentsTask(MomentsTask):
    """The second-moments round: also the global means, each feature's scale b (None when its mean is
    suppressed) and the histogram bins (0: none; 1: the count, which with proofs ties the second moment to the
    rows — `FeatureStatsParams.count_second_round`)."""

    stage: Literal["second_moments"]
    means: list[float | None] = Field(max_length=MAX_FEATURES)
    second_scales: list[Annotated[float, Field(ge=0)] | None] = Field(max_length=MAX_FEATURES)
    bins: int = Field(ge=0, le=MAX_BINS)

    @model_validator(mode="after")
    def _per_feature(self) -> SecondMomentsTask:
        f = len(self.features)
        if len(self.means) != f or len(self.second_scales) != f:
            raise ValueError(f"means: means and second_scales must have one entry per feature ({f})")
        return self


class ClipQuantilesTask(BaseModel):
    """The clip round (`clip_at`): each feature's hierarchical histogram over [lower, upper], as the quantiles
    kind's round (`queries.quantiles.tree_vector`)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    stage: Literal["clip_quantiles"]
    features: list[FeatureSpec] = Field(min_length=1, max_length=MAX_FEATURES)
    branching: int = Field(ge=2, le=TREE_MAX_BRANCHING)
    levels: int = Field(ge=1, le=TREE_MAX_LEVELS)
    max_examples: int = Field(ge=1, le=MAX_EXAMPLES_PER_DEVICE)

    @model_validator(mode="after")
    def _fits(self) -> ClipQuantilesTask:
        check_tree_size(len(self.features), self.branching, self.levels)
        return self


class FeatureStatsTask(RootModel[Annotated[RowCountsTask | ClipQuantilesTask | FirstMomentsTask | SecondMomentsTask,
                                           Field(discriminator="stage")]]):
    """A feature_stats round's task, by `stage`: row_counts, clip_quantiles, first_moments or second_moments."""


def effective_features(params: FeatureStatsParams, state: FeatureStatsState) -> list[FeatureSpec]:
    """The features as the moment rounds use them: with `clip_at`, each upper bound lowered to its clip."""
    if state.clip_uppers is None:
        return list(params.features)
    return [spec.model_copy(update={"upper": upper}) if spec.lower < upper < spec.upper else spec
            for spec, upper in zip(params.features, state.clip_uppers)]


def _second_scale(spec: FeatureSpec, mean: float) -> float:
    """b: the largest ((x − mean)/range)² over x in [lower, upper]."""
    r = spec.upper - spec.lower
    return max(mean - spec.lower, spec.upper - mean) ** 2 / (r * r)

FEATURE_STATS_TEMPLATE = KindTemplate(
    "feature_stats: count, mean, variance and a histogram per numeric feature, and a scaler",
    {
        "kind": "feature_stats",
        "name": "scaling of age, income, sessions",
        "source": "features",
        "params": {"features": [{"name": "age", "lower": 18, "upper": 90},
                                {"name": "income", "lower": 0, "upper": 200000},
                                {"name": "sessions", "lower": 0, "upper": 20}],
                   "max_examples_per_device": 3, "bins": 4},
        "privacy": {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6},
        # 60 s: a simulated fleet proves each device's moments (about 700 bits, ~0.1 s) before it can answer
        "cohort": {"min_clients": 100, "max_clients": 1000, "phase_timeout_s": 120},
    },
    {
        "params.features": "each feature's name in the device rows and public clipping bounds: values "
                           "outside [lower, upper] are clipped, so the bounds set the noise",
        "params.max_examples_per_device": "rows one device contributes at most (more are sampled)",
        "params.bins": "equal-width histogram bins per feature between lower and upper (optional)",
    },
)
"""Starter spec of `fa init feature_stats` (queries.templates)."""


class FeatureStatsKind(QueryKind[FeatureStatsParams, FeatureStatsState]):
    name = "feature_stats"
    supports_proofs = True
    Params = FeatureStatsParams
    State = FeatureStatsState
    examples = (KindExample({"features": [{"name": "age", "lower": 18, "upper": 90}, {"name": "income", "lower": 0, "upper": 2e5}]},
                            [{"age": 31.0, "income": 52000.0}, {"age": 64.0}]),)
    template = FEATURE_STATS_TEMPLATE
    Task = FeatureStatsTask

    def rounds_upper_bound(self, params: FeatureStatsParams) -> int:
        return params.rounds

    def bind_privacy(self, raw_params: dict[str, Any], privacy: PrivacySpec) -> dict[str, Any]:
        """Noisy queries get `precision_bits = NOISY_PRECISION_BITS`, and queries with validity proofs
        (`privacy.validation` "proofs" or unset, which the server resolves to proofs for this kind) get
        `count_second_round = True` so that their second round is tied to the rows, each unless the analyst chose
        it."""
        if not isinstance(raw_params, dict):
            return raw_params
        bound = dict(raw_params)
        if privacy.mechanism != "none" and "precision_bits" not in bound:
            bound["precision_bits"] = NOISY_PRECISION_BITS
        if privacy.validation != "none" and "count_second_round" not in bound:
            bound["count_second_round"] = True
        return bound

    def initial_state(self, params: FeatureStatsParams) -> FeatureStatsState:
        return FeatureStatsState(bound=params.max_examples_per_device)

    def plan_round(self, params: FeatureStatsParams, state: FeatureStatsState, round_index: int) -> RoundPlan | None:
        f = len(params.features)
        bins = params.second_round_bins
        weights = params.weights()
        offset = 1 if params.bound_from_data else 0
        if state.bound is None:
            grid = bound_grid(params.max_examples_limit)
            return RoundPlan(
                round=round_index, task=self.task_json(FeatureStatsTask(RowCountsTask(stage="row_counts", grid=grid))),
                dim=row_counts_layout(len(grid)).dim, max_abs=1, l1_sensitivity=1.0, l2_sensitivity=1.0,
                privacy_weight=weights[0], purpose="contribution bound: devices by rows held",
            )
        m = state.bound
        if params.clip_at is not None and state.clip_uppers is None:
            b, d = tree(CLIP_RESOLUTION)
            clip = FeatureStatsTask(ClipQuantilesTask(stage="clip_quantiles", features=params.features, branching=b,
                                                      levels=d, max_examples=m))
            l1, l2 = self.task_sensitivity(clip)
            return RoundPlan(round=round_index, task=self.task_json(clip), dim=f * feature_dim(b, d), max_abs=m,
                             l1_sensitivity=l1, l2_sensitivity=l2, privacy_weight=weights[offset],
                             purpose=f"clip bounds: each feature's {params.clip_at:g}-quantile")
        offset = params.first_moments_index
        features = effective_features(params, state)
        k = params.scale_exp_for(state.bound)
        task: MomentsTask
        if state.stage == 0:
            task = FirstMomentsTask(stage="first_moments", first_moment="centred", features=features,
                                    scale_exp=k, max_examples=m)
            dim, purpose = first_moments_layout(f).dim, "counts and means"
            weight = weights[offset]
        elif state.stage == 1:
            scales = [None if mean is None else _second_scale(spec, mean) for spec, mean in zip(features, state.means)]
            task = SecondMomentsTask(stage="second_moments", features=features, scale_exp=k, max_examples=m,
                                     means=state.means, second_scales=scales, bins=bins)
            dim = second_moments_layout(f, bins).dim
            purpose = "variances" + (" and histograms" if params.bins else "")
            weight = weights[offset + 1]
        else:
            return None
        typed = FeatureStatsTask(task)
        l1, l2 = self.task_sensitivity(typed)
        return RoundPlan(round=round_index, task=self.task_json(typed), dim=dim, max_abs=m * (1 << k),
                         l1_sensitivity=l1, l2_sensitivity=l2, privacy_weight=weight, purpose=purpose)

    def task_sensitivity(self, task: FeatureStatsTask) -> tuple[float, float]:
        """Rows held: one 1 (one-hot). Moments: per example and feature at most 2^K in each of the count and the
        first moment (first moments), or in the scaled second moment and one histogram bin (second moments; a
        single bin is the count); at most `max_examples` examples."""
        t = task.root
        if isinstance(t, RowCountsTask):
            return 1.0, 1.0
        if isinstance(t, ClipQuantilesTask):
            return tree_sensitivity(t)
        per_example = 2 if not isinstance(t, SecondMomentsTask) or t.bins else 1
        f, unit = len(t.features), t.max_examples * (1 << t.scale_exp)
        return float(unit * per_example * f), float(unit * math.sqrt(per_example) * math.sqrt(f))

    def contribute(self, task: FeatureStatsTask, rows: list[Any], rng: np.random.Generator) -> np.ndarray:
        t = task.root
        if isinstance(t, ClipQuantilesTask):
            return tree_vector(t, rows, rng)
        if isinstance(t, RowCountsTask):
            vec = np.zeros(len(t.grid) + 1, dtype=np.int64)
            if rows:
                vec[int(np.searchsorted(t.grid, len(rows)))] = 1  # len(grid): above the limit
            return vec
        specs, k, m = t.features, t.scale_exp, t.max_examples
        rows = cap_rows(rows, m, rng)
        unit = float(1 << k)
        columns = []
        for spec in specs:
            x = numeric_column(rows, spec.name)
            columns.append(np.clip(x[~np.isnan(x)], spec.lower, spec.upper))
        if not isinstance(t, SecondMomentsTask):
            counts, firsts = np.zeros(len(specs), dtype=np.int64), np.zeros(len(specs), dtype=np.int64)
            for j, (spec, x) in enumerate(zip(specs, columns)):
                counts[j] = len(x) << k
                centred = 2 * (x - spec.lower) / (spec.upper - spec.lower) - 1
                firsts[j] = int(_stochastic_round(centred * unit, rng).sum())
            return first_moments_layout(len(specs)).pack(counts=counts, firsts=firsts)
        bins = t.bins
        seconds = np.zeros(len(specs), dtype=np.int64)
        hists = np.zeros((len(specs), bins), dtype=np.int64)
        for j, (spec, x, mean, b) in enumerate(zip(specs, columns, t.means, t.second_scales)):
            r = spec.upper - spec.lower
            if bins:
                idx = np.minimum(((x - spec.lower) / r * bins).astype(np.int64), bins - 1)
                hists[j] = np.bincount(idx, minlength=bins).astype(np.int64) << k
            if mean is None or not b or b <= 0:
                continue
            z = np.minimum(((x - mean) / r) ** 2 / b, 1.0)  # ≤ 1 by the choice of b
            seconds[j] = int(_stochastic_round(z * unit, rng).sum())
        return second_moments_layout(len(specs), bins).pack(seconds=seconds, histograms=hists)

    def validity(self, task: FeatureStatsTask) -> Statement:
        """Rows held (bound from the data): a one-hot over the grid's buckets, at most one 1. Moments: every
        entry within what `max_examples` examples can add ([0, max_examples·2^scale_exp]), linked per feature
        as the examples link them (each example adds at most 2^K in size to a moment and exactly 2^K to its count
        and to one bin): a centred first moment at most its count in size; with bins, the bins adding up to at most the bound and
        the second moment at most the bins' sum (the round's count). With proofs the second round always carries
        bins (one, the count, when the analyst asked for none: `count_second_round`), so a device cannot claim
        moments without the rows that make them in either round (docs/validation.md)."""
        t = task.root
        if isinstance(t, RowCountsTask):
            return Statement((Bits(row_counts_layout(len(t.grid)).dim, 1),))
        if isinstance(t, ClipQuantilesTask):  # as the quantiles kind's: each level adds up to the count
            return tree_statement(t)
        f, top = len(t.features), t.max_examples << t.scale_exp
        if not isinstance(t, SecondMomentsTask):  # counts, then centred first moments: |moment| ≤ count
            relations = [Relation(((j, 1), (f + j, sign)), 0, 2 * top) for j in range(f) for sign in (-1, 1)]
            return Statement((Ranged(f, 0, top), Ranged(f, -top, top)), relations=tuple(relations))
        if not t.bins:
            return Statement((Ranged(f, 0, top),))
        relations = []
        for j in range(f):  # second moments, then the bins feature-major
            bins = tuple((f + j * t.bins + b, 1) for b in range(t.bins))
            relations += [Relation(bins, 0, top), Relation(bins + ((j, -1),), 0, top)]
        return Statement((Ranged(f, 0, top), Ranged(f * t.bins, 0, top)), relations=tuple(relations))

    def decode_round(
        self,
        params: FeatureStatsParams,
        state: FeatureStatsState,
        plan: RoundPlan,
        aggregate: np.ndarray,
        contributors: int,
        noise: AggregateNoise | None = None,
    ) -> FeatureStatsState:
        if state.bound is None:
            return self._decode_bound(params, state, plan, aggregate, contributors, noise)
        if params.clip_at is not None and state.clip_uppers is None:
            return self._decode_clip(params, state, plan, aggregate, contributors, noise)
        f = len(params.features)
        features = effective_features(params, state)
        unit = float(1 << params.scale_exp_for(state.bound))
        agg = np.asarray(aggregate, dtype=np.float64) / unit
        std = 0.0 if noise is None else float(noise.std) / unit
        if state.stage == 0:
            first = first_moments_layout(f).view(agg, "aggregate")
            counts, firsts = first["counts"], first["firsts"]
            means: list[float | None] = []
            for spec, c, s in zip(features, counts, firsts):
                if c < max(params.min_count, 1e-9):
                    means.append(None)
                else:
                    mean = (spec.lower + spec.upper) / 2 + (spec.upper - spec.lower) / 2 * s / c
                    means.append(float(min(max(mean, spec.lower), spec.upper)))
            return replace(state, stage=1, counts=counts.tolist(), firsts=firsts.tolist(), means=means,
                           contributors=state.contributors + [contributors], noise_std=[std])
        sent = plan.typed_task(self).root
        bins = sent.bins if isinstance(sent, SecondMomentsTask) else params.second_round_bins  # what the devices got
        second = second_moments_layout(f, bins).view(agg, "aggregate")
        seconds = [float(s2) * (_second_scale(spec, mean) if mean is not None else 0.0)
                   for spec, mean, s2 in zip(features, state.means, second["seconds"])]
        hist = second["histograms"].tolist() if bins else None
        return replace(state, stage=2, seconds=seconds, histograms=hist,
                       contributors=state.contributors + [contributors], noise_std=state.noise_std + [std])

    def _decode_bound(
        self, params: FeatureStatsParams, state: FeatureStatsState, plan: RoundPlan, aggregate: np.ndarray,
        contributors: int, noise: AggregateNoise | None,
    ) -> FeatureStatsState:
        grid = bound_grid(params.max_examples_limit)
        counts = row_counts_layout(len(grid)).view(np.asarray(aggregate, dtype=np.float64), "aggregate")["devices"]
        std = 0.0 if noise is None else float(noise.std)
        tau = release_threshold(noise, contributors, len(grid) + 1, BOUND_FALSE_RATE, 1.0)
        w = params.weights()
        # first-moment noise per row of bound
        row_std = std * math.sqrt(w[0] / w[params.first_moments_index]) * math.sqrt(2 * len(params.features))
        choice = choose_bound(grid, counts, tau, std, row_std)
        record = {**choice.__dict__, "grid": grid, "counts": counts.tolist(), "noise_std": std, "threshold": tau}
        return replace(state, bound=choice.bound, bound_choice=record, contributors=state.contributors + [contributors])

    @staticmethod
    def _decode_clip(
        params: FeatureStatsParams, state: FeatureStatsState, plan: RoundPlan, aggregate: np.ndarray,
        contributors: int, noise: AggregateNoise | None,
    ) -> FeatureStatsState:
        """The clip round: per feature its `clip_at`-quantile from the noisy tree (as the quantiles kind's release),
        and the upper bound the moments use — the upper edge of the quantile's leaf (never below the quantile)."""
        assert params.clip_at is not None
        b, d = tree(CLIP_RESOLUTION)
        per, leaves = feature_dim(b, d), b ** d
        agg = np.asarray(aggregate, dtype=np.float64)
        std = 0.0 if noise is None else float(noise.std)
        uppers, choice = [], []
        for j, spec in enumerate(params.features):
            rel = release_feature(spec, agg[j * per:(j + 1) * per], b, d, std, [params.clip_at])
            value, lo, hi = rel.quantiles[params.clip_at]
            width = (spec.upper - spec.lower) / leaves
            k = min(max(math.ceil((value - spec.lower) / width - 1e-9), 1), leaves)
            upper = min(spec.lower + k * width, spec.upper)
            uppers.append(upper)
            choice.append({"quantile": value, "ci95": [lo, hi], "upper": upper, "noise_std": std})
        return replace(state, clip_uppers=uppers, clip_choice=choice, contributors=state.contributors + [contributors])

    def preview(self, params: FeatureStatsParams, rounds: list[RoundPreview]) -> tuple[list[ExpectedValue], list[ReleaseWarning]]:
        """Bins carry their round's noise, counts the first round's combined (inverse variance) with the second
        round's bins' sum when it carries bins (the analyst's, or the count alone, `count_second_round`); a mean's and a variance's noise depend on the data, so they
        are given for `contributors` devices each holding `bound` rows, with the mean mid-range (b = ¼); a mean
        near a bound makes the variance's noise up to 4× larger. With the bound chosen from the data the
        rounds are planned at `max_examples_limit` (the most it can choose): every std is then an upper bound.
        `std_range` says how far the data can move each std: rows per device from 1 to the bound (means and
        variances: n from `contributors` to `contributors`·bound), and a bound chosen from the data from 1 to
        `max_examples_limit` (the moment rounds' noise scales with it)."""
        by_stage = {r.plan.typed_task(self).root.stage: r for r in rounds}
        clip_warning = []
        if params.clip_at is not None:
            share = params.clip_budget_share
            clip_warning.append(ReleaseWarning(value_path("features"), (
                f"clip_at: a first round spends {share:.0%} of the privacy budget on each feature's {params.clip_at:g}-"
                "quantile (a hierarchical histogram over [lower, upper]); the moments then use [lower, that quantile], "
                "clipping the values above it, with the rest of the budget")))
        first, second, counts = by_stage.get("first_moments"), by_stage.get("second_moments"), by_stage.get("row_counts")
        values: list[ExpectedValue] = []
        warnings: list[ReleaseWarning] = clip_warning
        if first is None:
            return values, warnings
        moments = first.plan.typed_task(self).root
        assert isinstance(moments, FirstMomentsTask)
        bound = moments.max_examples
        unit = float(1 << moments.scale_exp)
        s1 = first.std / unit
        s2 = second.std / unit if second is not None else 0.0
        count_std = s1
        if second is not None:  # the second round's bins (the analyst's, or the count alone) estimate the count too
            carried = second.plan.typed_task(self).root
            sent = carried.bins if isinstance(carried, SecondMomentsTask) else 0
            if sent and s1 > 0 and s2 > 0:
                count_std = 1 / math.sqrt(1 / (s1 * s1) + 1 / (sent * s2 * s2))
        n = max(first.contributors * bound, 1)
        assumed = f"assuming {first.contributors} devices × {bound} rows = {n} values and the mean mid-range"
        if params.bound_from_data:
            warnings.append(ReleaseWarning(value_path("contribution_bound", "max_examples_per_device"),
                f"max_examples_per_device is chosen from the data (at most {bound}, max_examples_limit) with "
                f"{params.bound_budget_share:.0%} of the budget; these stds are for {bound} "
                "rows per device and shrink in proportion to the bound chosen"))
            if counts is not None:
                for b in range(counts.plan.dim):
                    values.append(ExpectedValue(value_path("contribution_bound", "devices_by_rows", "counts", b), counts.std))
        chosen = 1.0 / bound if params.bound_from_data else 1.0  # the least bound the data may choose, over the most
        rows = (first.contributors, n)  # every device with 1 row … with `bound` rows

        def spread(worst: float) -> tuple[float, float]:
            """(least, largest) of a mean's or variance's std that is `worst` with one row per device: the least has
            `bound` rows on every device (a bound b chosen from the data scales the noise by b/bound and allows b
            rows, so the least is the same)."""
            return worst * rows[0] / rows[1], worst

        for spec in params.features:
            r = spec.upper - spec.lower
            path = functools.partial(value_path, "features", spec.name)
            mean_std = r / 2 / n * s1  # mid-range: the count's noise does not reach the mean
            values.append(ExpectedValue(path("count"), count_std,
                                        std_range=(count_std * chosen, count_std) if chosen < 1 else None))
            values.append(ExpectedValue(path("mean"), mean_std, assumed,
                                        std_range=spread(r / 2 / rows[0] * s1 * math.sqrt(2))))  # at a bound: √2
            if Z95 * mean_std > 0.05 * r:
                warnings.append(ReleaseWarning(path("mean"), f"the mean's 95 % interval is expected to be ±{Z95 * mean_std:.4g}, "
                                                             f"more than 5 % of [lower, upper] ({assumed}): raise privacy.epsilon, "
                                                             "narrow lower/upper, or include more devices"))
            if second is not None:
                var_std = r * r * 0.25 * s2 / n
                values.append(ExpectedValue(path("var"), var_std, assumed,
                                            std_range=spread(r * r * 0.25 * s2 / rows[0])))
                if Z95 * var_std > r * r / 16:
                    warnings.append(ReleaseWarning(path("var"), f"the variance's 95 % interval is expected to be "
                                                                f"±{Z95 * var_std:.4g}, wider than a typical variance in "
                                                                f"[lower, upper] (range²/16 = {r * r / 16:.4g}; {assumed}): "
                                                                "it may be floored (var_floored)"))
                for b in range(params.bins or 0):
                    values.append(ExpectedValue(path("histogram", "counts", b), s2))
        return values, warnings

    def finalize(self, params: FeatureStatsParams, state: FeatureStatsState, stop_reason: str | None = None) -> Release:
        """Features whose variance is not known (suppressed, or the query stopped before the last round) are
        listed in `suppressed`."""
        features: dict[str, Any] = {}
        suppressed: list[str] = []
        noise_std: dict[str, float] = {}
        intervals: dict[str, tuple[float, float]] = {}
        warnings: list[ReleaseWarning] = []
        done = state.stage >= 2
        s1 = state.noise_std[0] if len(state.noise_std) > 0 else 0.0
        s2 = state.noise_std[1] if len(state.noise_std) > 1 else 0.0
        # the moment rounds may have different contributors (dropouts, other cohorts): second-round sums are
        # rescaled to the first round's population, which the counts and means describe
        n1, n2 = (state.contributors[-2], state.contributors[-1]) if done and len(state.contributors) >= 2 else (1, 1)
        to_first = n1 / n2 if n1 > 0 and n2 > 0 else 1.0
        s2 *= to_first
        bins = len(state.histograms[0]) if state.histograms else 0  # the bins the second round carried
        for i, (declared, spec) in enumerate(zip(params.features, effective_features(params, state))):
            mean = state.means[i] if done and i < len(state.means) else None
            if mean is None:
                suppressed.append(spec.name)
                continue
            path = functools.partial(value_path, "features", spec.name)
            entry, stds, ivs, notes = _feature_entry(spec, state, i, s1, s2, bins, to_first, histogram=bool(params.bins))
            if params.clip_at is not None and state.clip_choice is not None:
                c = state.clip_choice[i]
                entry["clip"] = {"at": params.clip_at, "quantile": c["quantile"], "quantile_ci95": c["ci95"],
                                 "upper": spec.upper, "declared_upper": declared.upper}
                if c["noise_std"] > 0:
                    noise_std[path("clip", "quantile")] = max((c["ci95"][1] - c["ci95"][0]) / (2 * Z95), 1e-12)
                    intervals[path("clip", "quantile")] = (c["ci95"][0], c["ci95"][1])
            features[spec.name] = entry
            for key, value in stds.items():
                noise_std[path(*key)] = value
            for key, iv in ivs.items():
                intervals[path(*key)] = iv
            for key, message in notes:
                warnings.append(ReleaseWarning(path(*key) if key else path(), message))
        names = list(features)
        scaler = {
            "feature_names_in_": names,
            "n_features_in_": len(names),
            "mean_": [features[n]["mean"] for n in names],
            "var_": [features[n]["var"] for n in names],
            "scale_": [features[n]["std"] if features[n]["std"] > 0 else 1.0 for n in names],
            "n_samples_seen_": [features[n]["count"] for n in names],
        }
        for j, n in enumerate(names):  # the scaler repeats released values: same noise, same intervals
            for attr, name in (("mean_", "mean"), ("var_", "var"), ("n_samples_seen_", "count")):
                src = value_path("features", n, name)
                if src in noise_std:
                    noise_std[value_path("scaler", attr, j)] = noise_std[src]
                    if src in intervals:
                        intervals[value_path("scaler", attr, j)] = intervals[src]
        result: dict[str, Any] = {"features": features, "scaler": scaler, "suppressed": suppressed,
                                  "clients": max(state.contributors) if state.contributors else 0,
                                  "contribution_bound": self._bound_block(params, state, noise_std, intervals, warnings)}
        if stop_reason and suppressed:
            warnings.append(ReleaseWarning(None, f"the query stopped early ({stop_reason}): features without a "
                                                 "variance are listed in suppressed"))
        advice = ("raise privacy.epsilon, narrow the feature's lower/upper bounds, lower max_examples_per_device, or "
                  "include more devices (cohort.min_clients)")
        auxiliary = ("/scaler", "/contribution_bound",
                     *(value_path("features", n, k) for n in names for k in ("sample_var", "std", "clip")))
        return Release(result, noise_std=noise_std, intervals=intervals, warnings=warnings, advice=advice,
                       auxiliary=auxiliary)

    @staticmethod
    def _bound_block(
        params: FeatureStatsParams, state: FeatureStatsState, noise_std: dict[str, float],
        intervals: dict[str, tuple[float, float]], warnings: list[ReleaseWarning],
    ) -> dict[str, Any]:
        """`contribution_bound`: the bound the moment rounds used, and, when chosen from the data, the noisy
        devices-by-rows histogram it was chosen from and what it clipped."""
        if not params.bound_from_data:
            return {"max_examples_per_device": params.max_examples_per_device, "chosen_from_data": False}
        choice = state.bound_choice
        if state.bound is None or choice is None:
            return {"max_examples_per_device": None, "chosen_from_data": True}
        std = float(choice["noise_std"])
        counts = [max(0.0, float(c)) for c in choice["counts"]]
        block: dict[str, Any] = {
            "max_examples_per_device": state.bound,
            "chosen_from_data": True,
            "budget_share": params.bound_budget_share,
            "devices_by_rows": {"upper_edges": choice["grid"] + [None], "counts": counts},
            "devices_over_bound": max(0.0, float(choice["devices_over"])),
            "rows_clipped": max(0.0, float(choice["rows_clipped"])),
        }
        if std > 0:
            for b, c in enumerate(counts):
                p = value_path("contribution_bound", "devices_by_rows", "counts", b)
                noise_std[p], intervals[p] = std, interval(c, std, 0.0)
            for key in ("devices_over_bound", "rows_clipped"):
                s = float(choice[f"{'devices_over' if key == 'devices_over_bound' else key}_std"])
                if s > 0:
                    p = value_path("contribution_bound", key)
                    noise_std[p], intervals[p] = s, interval(block[key], s, 0.0)
        if not choice["evidence"]:
            warnings.append(ReleaseWarning(value_path("contribution_bound", "max_examples_per_device"),
                f"no bucket of the devices-by-rows histogram rose above its noise (threshold {fmt(choice['threshold'])} "
                f"devices), so the largest bound ({state.bound}, params.max_examples_limit) was used: set "
                "max_examples_per_device yourself, raise privacy.epsilon or bound_budget_share, or include more devices"))
        return block

    def tabulate(self, result: dict[str, Any]) -> list[ResultTable]:
        """One row per released feature (count, mean, variance, std, declared bounds), then one table per feature
        histogram (bars of the bin counts)."""
        features = result.get("features") or {}
        rows = tuple({"feature": Cell(name), **{k: num_cell(f.get(k), "features", name, k)
                                                for k in ("count", "mean", "var", "std")},
                      "lower": Cell(f.get("lower")), "upper": Cell(f.get("upper"))} for name, f in features.items())
        cols = (Column("feature", "feature", "key"), Column("count", "count"), Column("mean", "mean"),
                Column("var", "variance"), Column("std", "std"), Column("lower", "lower"), Column("upper", "upper"))
        suppressed = result.get("suppressed") or []
        caption = (f"{result.get('clients')} contributors; the scaler (sklearn StandardScaler attributes): --format json"
                   + (f"; suppressed: {', '.join(map(str, suppressed))}" if suppressed else ""))
        tables = [ResultTable("features", None, cols, rows, None, caption)]
        for name, f in features.items():
            hist = f.get("histogram") or {}
            edges, counts = hist.get("edges") or [], hist.get("counts") or []
            if not counts or len(edges) != len(counts) + 1:
                continue
            bins = tuple({"bin": Cell(f"[{edges[i]:.4g}, {edges[i + 1]:.4g})"), "lower": Cell(edges[i]),
                          "upper": Cell(edges[i + 1]), "count": num_cell(c, "features", name, "histogram", "counts", i)}
                         for i, c in enumerate(counts))
            tables.append(ResultTable(f"histogram:{name}", f"{name} histogram",
                                      (Column("bin", "bin", "key"), Column("lower", "from"), Column("upper", "to"),
                                       Column("count", "count")), bins, Chart("bar", "bin", ("count",))))
        return tables


def _feature_entry(
    spec: FeatureSpec, state: FeatureStatsState, i: int, s1: float, s2: float, bins: int, to_first: float = 1.0,
    histogram: bool = True,
) -> tuple[dict[str, Any], dict[tuple[Any, ...], float], dict[tuple[Any, ...], tuple[float, float]], list[tuple[tuple[Any, ...], str]]]:
    """One released feature: its entry, the noise std and 95 % interval of each noisy value (keyed by the path
    below the feature), and its warnings. `bins`: the bins the second round carried (their sum is a second estimate
    of the count); `histogram`: whether they are the analyst's histogram (released) or only the count that ties the
    second moment to the rows (`count_second_round`, not released). `to_first` rescales the second round's sums
    (whose std `s2` already includes it) to the first round's contributors."""
    r = spec.upper - spec.lower
    stds: dict[tuple[Any, ...], float] = {}
    ivs: dict[tuple[Any, ...], tuple[float, float]] = {}
    notes: list[tuple[tuple[Any, ...], str]] = []
    count = float(state.counts[i])
    count_std = s1
    hist = None
    if bins and state.histograms is not None:
        raw_bins = np.asarray(state.histograms[i], dtype=np.float64) * to_first
        if s1 > 0 and s2 > 0:  # inverse-variance combination of the count with the bins' sum
            v1, vb = s1 * s1, bins * s2 * s2
            count = (count / v1 + float(raw_bins.sum()) / vb) / (1 / v1 + 1 / vb)
            count_std = 1 / math.sqrt(1 / v1 + 1 / vb)
        if histogram:
            hist = integer_parts(project_to_total(raw_bins, float(round(max(count, 0.0)))))
    count = max(count, 0.0)
    mean = float(state.means[i])  # type: ignore[arg-type]
    nu = (2 * mean - spec.lower - spec.upper) / r  # the centred mean, in [−1, 1]
    c1 = max(float(state.counts[i]), 1e-12)  # the means were decoded with round 1's count
    mean_std = r / 2 / c1 * s1 * math.sqrt(1 + nu * nu) if s1 > 0 else 0.0
    cvar = max(count, 1e-12)
    raw_var = r * r * float(state.seconds[i]) * to_first / cvar - mean_std**2  # centring on the noisy mean adds its variance
    b = _second_scale(spec, mean)
    var_std = math.hypot(r * r * b * s2 / cvar, raw_var * count_std / cvar) if s2 > 0 else 0.0
    max_var = r * r / 4
    floor = min(var_std, max_var)
    floored = raw_var < floor and var_std > 0
    var = min(max(raw_var, floor, 0.0), max_var)
    std = math.sqrt(var)
    entry: dict[str, Any] = {
        "count": int(round(count)),
        "mean": mean,
        "var": var,
        "sample_var": var * count / (count - 1) if count > 1 else None,
        "std": std,
        "lower": spec.lower,
        "upper": spec.upper,
    }
    if floored:
        entry["var_floored"] = True
        notes.append((("var",), f"the noisy variance ({fmt(raw_var)}) is within one noise std ({fmt(var_std)}) of 0: "
                                f"released at the floor {fmt(var)} (var_floored): the variance is only known to lie below "
                                f"{fmt(var + Z95 * var_std)} (its 95 % interval) — raise privacy.epsilon, narrow "
                                "lower/upper, or include more devices before scaling with it"))
    if hist is not None:
        entry["histogram"] = {"edges": np.linspace(spec.lower, spec.upper, bins + 1).tolist(),
                              "counts": hist.tolist()}
    if s1 > 0:
        # around the released (rounded) count, so the interval always holds the value it is printed beside
        stds[("count",)], ivs[("count",)] = count_std, interval(float(entry["count"]), count_std, 0.0)
        stds[("mean",)], ivs[("mean",)] = mean_std, interval(mean, mean_std, spec.lower, spec.upper)
    if s2 > 0:
        lo, hi = interval(var, var_std, 0.0, max_var)
        stds[("var",)], ivs[("var",)] = var_std, (lo, hi)
        if count > 1:
            k = count / (count - 1)
            stds[("sample_var",)], ivs[("sample_var",)] = var_std * k, (lo * k, hi * k)
        stds[("std",)] = var_std / (2 * std) if std > 0 else math.sqrt(var_std)
        ivs[("std",)] = (math.sqrt(lo), math.sqrt(hi))
        if hist is not None:
            for b_i, c in enumerate(hist):
                stds[("histogram", "counts", b_i)], ivs[("histogram", "counts", b_i)] = s2, interval(float(c), s2, 0.0)
    return entry, stds, ivs, notes


class StandardScaling:
    """Applies a finished feature_stats result on a device: (x − mean_) / scale_ per named feature."""

    def __init__(self, result: dict[str, Any]) -> None:
        scaler = result.get("scaler") if isinstance(result, dict) else None
        if not scaler or "feature_names_in_" not in scaler:
            raise QueryKindError("result: not a finished feature_stats result (no scaler block)")
        self.names: list[str] = list(scaler["feature_names_in_"])
        self.mean = np.asarray(scaler["mean_"], dtype=np.float64)
        self.scale = np.asarray(scaler["scale_"], dtype=np.float64)

    def transform(self, x: np.ndarray) -> np.ndarray:
        """Rows of features in `names` order → standardised array."""
        arr = np.asarray(x, dtype=np.float64)
        if arr.shape[-1] != len(self.names):
            raise QueryKindError(f"x: expected {len(self.names)} features, got {arr.shape[-1]}")
        return (arr - self.mean) / self.scale

    def transform_rows(self, rows: list[dict[str, Any]]) -> np.ndarray:
        """Dict rows → standardised array; missing values become 0 (the mean after scaling)."""
        cols = np.column_stack([numeric_column(rows, n) for n in self.names]) if rows else np.empty((0, len(self.names)))
        out = self.transform(cols)
        return np.where(np.isnan(out), 0.0, out)
