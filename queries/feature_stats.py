"""The `feature_stats` query kind: federated count, mean, variance and standard deviation per feature,
with optional equal-width histograms, for global feature scaling (Fritsch, Halder, Hartmann, Petukhov,
"Federated Learning: Collaborative Machine Learning without Centralized Training Data", TUM Data
Innovation Lab 2018, §4.1 and §5.3.2).

Encoding. Every entry of a device's vector is in units of 2^K per example, so all coordinates share one
scale: the count entry adds 2^K per present value, the first moment adds 2^K·(x − lower)/range, the
second moment adds 2^K·((x − m)/range)², a histogram bin adds 2^K. Values are clipped to the public
[lower, upper] bounds, and fractions are rounded stochastically (unbiased). K is chosen from the cap on
examples per device so that one device's entries stay below 2^46 and a cohort of up to 2^15 devices fits
the 62-bit ring; the rounding error is then ~2^-K of the range per example (≈1e-12 relative).

Two rounds. Round 1 sums counts and first moments (and histograms); round 2 sums second moments about
the global mean found in round 1. A single pass of Σx and Σx² loses precision by cancellation when the
spread is small against the mean (var = E[x²] − E[x]²); centring on the true mean avoids that. See
docs/feature_stats.md.

Missing values (absent, None, NaN, ±inf, non-numeric) are counted as missing, never as zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from queries.kind import AggregateNoise, QueryKind, QueryKindError, Release, RoundPlan, value_path
from queries.layout import Layout
from queries.spec import PrivacySpec
from secagg.validity.statement import Ranged, Statement

# Limits of a feature_stats spec (docs/feature_stats.md, "Limits"): round 1's vector has
# len(features)·(2 + bins) ≤ 1,002,000 entries.
MAX_FEATURES = 1000
MAX_BINS = 1000
MAX_NAME_CHARS = 128
MAX_EXAMPLES_PER_DEVICE = 100_000
MAX_MIN_COUNT = 10**12

DEVICE_BOUND_BITS = 46
NOISY_PRECISION_BITS = 16
"""Fixed-point bits per example under DP noise: the noise (≥ one example's worth) dwarfs a 2^-16 rounding
step, and a 2^40-wide unit would push the devices' noise shares beyond what the samplers accept."""


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
    CONTRIBUTION_BOUND: ClassVar[tuple[str, ...]] = ("precision_bits", "max_examples_per_device")
    """Params that bound one device's vector (named when a noise plan does not fit the devices)."""

    features: list[FeatureSpec] = Field(min_length=1, max_length=MAX_FEATURES)
    bins: int | None = Field(default=None, ge=1, le=MAX_BINS)
    max_examples_per_device: int = Field(default=100, ge=1, le=MAX_EXAMPLES_PER_DEVICE)
    min_count: int = Field(default=1, ge=0, le=MAX_MIN_COUNT)
    """Features with fewer (noisy) present values are suppressed and listed."""
    precision_bits: int | None = Field(default=None, ge=8, le=40)
    """Fixed-point unit 2^precision_bits per example instead of the widest that fits. Set to
    `NOISY_PRECISION_BITS` at submit for noisy queries (see `bind_privacy`)."""

    @field_validator("features")
    @classmethod
    def _unique(cls, v: list[FeatureSpec]) -> list[FeatureSpec]:
        seen: set[str] = set()
        dupes = sorted({f.name for f in v if f.name in seen or seen.add(f.name)})  # type: ignore[func-returns-value]
        if dupes:
            raise ValueError(f"duplicate feature names: {', '.join(dupes[:10])}")
        return v

    @property
    def scale_exp(self) -> int:
        widest = DEVICE_BOUND_BITS - math.ceil(math.log2(self.max_examples_per_device + 1))
        return widest if self.precision_bits is None else min(widest, self.precision_bits)


def _column(rows: list[Any], name: str) -> np.ndarray:
    """The feature's values over the rows, NaN where missing or not a finite number."""
    out = np.full(len(rows), np.nan)
    for i, row in enumerate(rows):
        value = row.get(name) if isinstance(row, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[i] = float(value)
    out[~np.isfinite(out)] = np.nan
    return out


def _stochastic_round(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    low = np.floor(x)
    return (low + (rng.random(x.shape) < x - low)).astype(np.int64)


def first_moments_layout(n_features: int, bins: int) -> Layout:
    """Round 1: per feature its count, its first moment, then its `bins` histogram counts (feature-major)."""
    return Layout.of(counts=n_features, firsts=n_features, histograms=(n_features, bins))


def second_moments_layout(n_features: int) -> Layout:
    """Round 2: per feature its second moment about the global mean."""
    return Layout.of(seconds=n_features)


@dataclass(frozen=True)
class FeatureStatsState:
    stage: int = 0
    """0: before round 1; 1: counts and means known; 2: variances known (finished)."""
    counts: list[float] = field(default_factory=list)
    """Per feature, the (noisy) number of present values."""
    means: list[float | None] = field(default_factory=list)
    """Per feature, the global mean, or None when suppressed (too few values)."""
    histograms: list[list[float]] | None = None
    vars: list[float | None] = field(default_factory=list)
    contributors: list[int] = field(default_factory=list)
    noise_std: list[float] = field(default_factory=list)
    """Per round, the standard deviation of each entry's noise, in examples (0 without noise)."""


class FeatureStatsKind(QueryKind[FeatureStatsParams, FeatureStatsState]):
    name = "feature_stats"
    supports_proofs = True
    Params = FeatureStatsParams
    State = FeatureStatsState

    def rounds_upper_bound(self, params: FeatureStatsParams) -> int:
        return 2

    def bind_privacy(self, raw_params: dict[str, Any], privacy: PrivacySpec) -> dict[str, Any]:
        """Noisy queries get `precision_bits = NOISY_PRECISION_BITS` unless the analyst chose one."""
        if privacy.mechanism == "none" or not isinstance(raw_params, dict) or "precision_bits" in raw_params:
            return raw_params
        return {**raw_params, "precision_bits": NOISY_PRECISION_BITS}

    def initial_state(self, params: FeatureStatsParams) -> FeatureStatsState:
        return FeatureStatsState()

    def plan_round(self, params: FeatureStatsParams, state: FeatureStatsState, round_index: int) -> RoundPlan | None:
        f = len(params.features)
        k = params.scale_exp
        m = params.max_examples_per_device
        bins = params.bins or 0
        task: dict[str, Any] = {
            "features": [spec.model_dump() for spec in params.features],
            "scale_exp": k,
            "max_examples": m,
        }
        if state.stage == 0:
            task |= {"stage": "first_moments", "bins": bins}
            dim = first_moments_layout(f, bins).dim
        elif state.stage == 1:
            task |= {"stage": "second_moments", "means": state.means}
            dim = second_moments_layout(f).dim
        else:
            return None
        l1, l2 = self.task_sensitivity(task)
        return RoundPlan(round=round_index, task=task, dim=dim, max_abs=m * (1 << k), l1_sensitivity=l1, l2_sensitivity=l2)

    def task_sensitivity(self, task: dict[str, Any]) -> tuple[float, float]:
        """Per example and feature at most 2^K in each of count, first moment and one histogram bin (first
        moments) or in the second moment; at most `max_examples` examples."""
        try:
            f, k, m, stage = len(task["features"]), task["scale_exp"], task["max_examples"], task["stage"]
        except (KeyError, TypeError) as exc:
            raise QueryKindError(f"task: malformed feature_stats task ({exc!r})") from None
        for name, v in (("scale_exp", k), ("max_examples", m)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise QueryKindError(f"task.{name}: must be an integer ≥ 0, got {v!r}")
        if stage not in ("first_moments", "second_moments"):
            raise QueryKindError(f"task.stage: unknown feature_stats stage {stage!r}")
        unit = m * (1 << k)
        per_example = 3 if stage == "first_moments" else 1  # count, first moment, one histogram bin ≤ 2^K each
        return float(unit * per_example * f), float(unit * math.sqrt(per_example) * math.sqrt(f))

    def contribute(self, task: dict[str, Any], rows: list[Any], rng: np.random.Generator) -> np.ndarray:
        try:
            specs = [FeatureSpec.model_validate(s) for s in task["features"]]
            k, m, stage = int(task["scale_exp"]), int(task["max_examples"]), task["stage"]
        except (KeyError, TypeError, ValueError) as exc:
            raise QueryKindError(f"task: malformed feature_stats task ({exc})") from None
        if len(rows) > m:
            rows = [rows[i] for i in sorted(rng.choice(len(rows), size=m, replace=False))]
        unit = float(1 << k)
        if stage == "first_moments":
            bins = int(task.get("bins") or 0)
            counts, firsts = np.zeros(len(specs), dtype=np.int64), np.zeros(len(specs), dtype=np.int64)
            hists = np.zeros((len(specs), bins), dtype=np.int64)
            for j, spec in enumerate(specs):
                x = _column(rows, spec.name)
                x = np.clip(x[~np.isnan(x)], spec.lower, spec.upper)
                frac = (x - spec.lower) / (spec.upper - spec.lower)
                counts[j] = len(x) << k
                firsts[j] = int(_stochastic_round(frac * unit, rng).sum())
                if bins:
                    idx = np.minimum((frac * bins).astype(np.int64), bins - 1)
                    hists[j] = np.bincount(idx, minlength=bins).astype(np.int64) << k
            return first_moments_layout(len(specs), bins).pack(counts=counts, firsts=firsts, histograms=hists)
        if stage == "second_moments":
            means = task["means"]
            seconds = np.zeros(len(specs), dtype=np.int64)
            for j, (spec, mean) in enumerate(zip(specs, means)):
                x = _column(rows, spec.name)
                x = np.clip(x[~np.isnan(x)], spec.lower, spec.upper)
                if mean is None:
                    continue
                z = ((x - mean) / (spec.upper - spec.lower)) ** 2
                seconds[j] = int(_stochastic_round(z * unit, rng).sum())
            return second_moments_layout(len(specs)).pack(seconds=seconds)
        raise QueryKindError(f"task: unknown feature_stats stage {stage!r}")

    def validity(self, task: dict[str, Any]) -> Statement:
        """Every entry within what `max_examples` examples can add: counts, first moments, histogram bins and
        second moments each in [0, max_examples·2^scale_exp]."""
        try:
            f, k, m, stage = len(task["features"]), int(task["scale_exp"]), int(task["max_examples"]), task["stage"]
        except (KeyError, TypeError, ValueError) as exc:
            raise QueryKindError(f"task: malformed feature_stats task ({exc})") from None
        top = m << k
        if stage == "first_moments":
            bins = int(task.get("bins") or 0)
            return Statement(tuple(Ranged(n, 0, top) for n in (f, f, f * bins) if n))
        return Statement((Ranged(f, 0, top),))

    def decode_round(
        self,
        params: FeatureStatsParams,
        state: FeatureStatsState,
        plan: RoundPlan,
        aggregate: np.ndarray,
        contributors: int,
        noise: AggregateNoise | None = None,
    ) -> FeatureStatsState:
        f = len(params.features)
        unit = float(1 << params.scale_exp)
        agg = np.asarray(aggregate, dtype=np.float64) / unit
        std = 0.0 if noise is None else float(noise.std) / unit
        if state.stage == 0:
            first = first_moments_layout(f, params.bins or 0).view(agg, "aggregate")
            counts, firsts = first["counts"], first["firsts"]
            means: list[float | None] = []
            for spec, c, s in zip(params.features, counts, firsts):
                if c < max(params.min_count, 1e-9):
                    means.append(None)
                else:
                    mean = spec.lower + (spec.upper - spec.lower) * s / c
                    means.append(float(min(max(mean, spec.lower), spec.upper)))
            hist = first["histograms"].tolist() if params.bins else None
            return FeatureStatsState(stage=1, counts=counts.tolist(), means=means, histograms=hist,
                                     contributors=[contributors], noise_std=[std])
        seconds = second_moments_layout(f).view(agg, "aggregate")["seconds"]
        variances: list[float | None] = []
        for spec, c, mean, s2 in zip(params.features, state.counts, state.means, seconds):
            if mean is None:
                variances.append(None)
            else:
                variances.append(float(max(s2, 0.0) * (spec.upper - spec.lower) ** 2 / c))
        return replace(state, stage=2, vars=variances, contributors=state.contributors + [contributors],
                       noise_std=(state.noise_std or [0.0]) + [std])  # [0.0]: stored before noise_std existed

    def finalize(self, params: FeatureStatsParams, state: FeatureStatsState, stop_reason: str | None = None) -> Release:
        """Features whose variance is not known (suppressed, or the query stopped before round 2) are listed
        in `suppressed`."""
        features: dict[str, Any] = {}
        suppressed: list[str] = []
        noise_std: dict[str, float] = {}
        for i, spec in enumerate(params.features):
            count = state.counts[i] if i < len(state.counts) else None
            mean = state.means[i] if i < len(state.means) else None
            var = state.vars[i] if i < len(state.vars) else None
            if count is None or mean is None or var is None:
                suppressed.append(spec.name)
                continue
            entry: dict[str, Any] = {
                "count": count,
                "mean": mean,
                "var": var,
                "sample_var": var * count / (count - 1) if count > 1 else None,
                "std": math.sqrt(var),
                "lower": spec.lower,
                "upper": spec.upper,
            }
            if params.bins and state.histograms is not None:
                edges = np.linspace(spec.lower, spec.upper, params.bins + 1).tolist()
                entry["histogram"] = {"edges": edges, "counts": state.histograms[i]}
            features[spec.name] = entry
            if state.noise_std and state.noise_std[0] > 0:  # round 1 sums: count and histogram bins
                noise_std[value_path("features", spec.name, "count")] = state.noise_std[0]
                for b in range(len(entry.get("histogram", {}).get("counts", []))):
                    noise_std[value_path("features", spec.name, "histogram", "counts", b)] = state.noise_std[0]
        names = list(features)
        scaler = {
            "feature_names_in_": names,
            "n_features_in_": len(names),
            "mean_": [features[n]["mean"] for n in names],
            "var_": [features[n]["var"] for n in names],
            "scale_": [features[n]["std"] if features[n]["std"] > 0 else 1.0 for n in names],
            "n_samples_seen_": [features[n]["count"] for n in names],
        }
        result = {"features": features, "scaler": scaler, "suppressed": suppressed,
                  "clients": max(state.contributors) if state.contributors else 0}
        return Release(result, noise_std=noise_std)


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
        cols = np.column_stack([_column(rows, n) for n in self.names]) if rows else np.empty((0, len(self.names)))
        out = self.transform(cols)
        return np.where(np.isnan(out), 0.0, out)

