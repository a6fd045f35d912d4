"""The `histogram` query kind: how many devices hold each of a fixed list of values.

One round. Each device looks at its `source` collection, counts its local values that are in
`params.buckets`, and sets a 1 in the slots of its `max_contributions_per_device` most frequent ones
(ties broken by bucket order), so one device moves any count by at most 1 and at most that many counts
(L1 sensitivity k, L2 √k). A device without matching values sends an all-zero vector: taking part
reveals nothing by itself.

Values that are not in the list: ignored by default; with `other_bucket` set they count towards that
extra bucket. Rows may be strings, numbers (compared by their text, e.g. 3 → "3") or objects with a
`"value"` field; anything else is ignored.

Release: a count is released when its (noisy) value reaches the threshold — `release_threshold` when
given, otherwise 0 without noise and `queries.release.release_threshold` with noise. Buckets
under the threshold are listed in `suppressed`, never silently dropped.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

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
from queries.release import count_threshold, release_threshold
from queries.table import Cell, Chart, Column, ResultTable, num_cell
from queries.selective import released_interval
from secagg.validity.statement import Bits, Statement

# Limits of a histogram spec (listed with every kind's in docs/security/spec.md).
MAX_BUCKETS = 100_000
"""Most buckets (the vector has one entry per bucket, plus `other_bucket`)."""
MAX_BUCKET_CHARS = 256
"""Longest bucket name (and `other_bucket`)."""
MAX_CONTRIBUTIONS = 1000
"""Largest `max_contributions_per_device`."""
MAX_COUNT = 1e12
"""Largest `release_threshold` and `min_release_count`."""
PREVIEW_LISTED = 1000
"""Buckets listed one by one in a preview (the rest share one representative entry)."""

BucketName = Annotated[str, StringConstraints(min_length=1, max_length=MAX_BUCKET_CHARS)]


class HistogramParams(BaseModel):
    model_config = ConfigDict(
        extra="forbid", allow_inf_nan=False, strict=True,
        json_schema_extra={"examples": [{"buckets": ["moon", "sun", "star"]}]},
    )
    CONTRIBUTION_BOUND: ClassVar[tuple[str, ...]] = ("max_contributions_per_device",)
    """Params that bound one device's vector (named when a noise plan does not fit the devices)."""

    buckets: list[BucketName] = Field(min_length=1, max_length=MAX_BUCKETS)
    max_contributions_per_device: int = Field(default=1, ge=1, le=MAX_CONTRIBUTIONS)
    other_bucket: BucketName | None = None
    """Name of an extra bucket counting devices whose values are not in `buckets` (off by default)."""
    release_threshold: float | None = Field(default=None, ge=0, le=MAX_COUNT)
    false_release_rate: float = Field(default=0.05, gt=0, lt=1)
    """With noise and no fixed threshold: chance that any zero-count bucket is released."""
    min_release_count: float = Field(default=0, ge=0, le=MAX_COUNT)
    """Floor of the derived threshold."""

    @field_validator("buckets")
    @classmethod
    def _unique_nonempty(cls, v: list[str]) -> list[str]:
        if any(not b for b in v):
            raise ValueError("bucket names must be non-empty strings")
        seen: set[str] = set()
        dupes = sorted({b for b in v if b in seen or seen.add(b)})  # type: ignore[func-returns-value]
        if dupes:
            raise ValueError(f"duplicate buckets: {', '.join(dupes[:10])}")
        return v

    @model_validator(mode="after")
    def _other_not_a_bucket(self) -> HistogramParams:
        if self.other_bucket is not None and self.other_bucket in self.buckets:
            raise ValueError(f"other_bucket {self.other_bucket!r} is already one of the buckets")
        if self.max_contributions_per_device > len(self.slots):
            raise ValueError(
                f"max_contributions_per_device ({self.max_contributions_per_device}) exceeds the number of buckets"
            )
        return self

    @property
    def slots(self) -> list[str]:
        return self.buckets + ([self.other_bucket] if self.other_bucket is not None else [])


class HistogramTask(BaseModel):
    """A histogram round's task: the buckets, the optional catch-all bucket and the per-device contribution bound."""

    model_config = ConfigDict(extra="forbid", strict=True)

    buckets: list[BucketName] = Field(min_length=1, max_length=MAX_BUCKETS)
    other_bucket: BucketName | None = None
    max_contributions: int = Field(ge=1, le=MAX_CONTRIBUTIONS)

    @property
    def dim(self) -> int:
        return len(self.buckets) + (self.other_bucket is not None)


def _value_text(row: Any) -> str | None:
    if isinstance(row, dict):
        row = row.get("value")
    if isinstance(row, bool):
        return "true" if row else "false"
    if isinstance(row, str):
        return row
    if isinstance(row, int):
        return str(row)
    if isinstance(row, float) and row.is_integer():
        return str(int(row))
    if isinstance(row, float):
        return repr(row)
    return None


@dataclass(frozen=True)
class HistogramState:
    done: bool = False
    raw: list[int] = field(default_factory=list)
    """The round's aggregate, one (noisy) count per slot."""
    contributors: int = 0
    threshold: float | None = None
    noise_std: float = 0.0
    """Standard deviation of each count's noise."""

HISTOGRAM_TEMPLATE = KindTemplate(
    "histogram: how many devices hold each value (each device votes for up to "
    "max_contributions_per_device of its values)",
    {
        "kind": "histogram",
        "name": "words typed",
        "source": "words",
        "params": {"buckets": ["moon", "sun", "star", "cloud", "rain"], "other_bucket": "other",
                   "max_contributions_per_device": 2},
        "privacy": {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6},
        "cohort": {"min_clients": 100, "max_clients": 1000, "phase_timeout_s": 60},
    },
    {
        "params.buckets": "the values to count (up to 100,000)",
        "params.other_bucket": "counts every value not in buckets (optional)",
        "params.max_contributions_per_device": "distinct buckets one device may vote for: bounds "
                                               "its influence, and the noise grows with it",
    },
)
"""Starter spec of `fa init histogram` (queries.templates)."""


class HistogramKind(QueryKind[HistogramParams, HistogramState]):
    name = "histogram"
    supports_proofs = True
    Params = HistogramParams
    State = HistogramState
    examples = (KindExample({"buckets": ["moon", "sun", "star"]}, ["moon", "sun", "moon", "comet"]),)
    template = HISTOGRAM_TEMPLATE
    Task = HistogramTask

    def initial_state(self, params: HistogramParams) -> HistogramState:
        return HistogramState()

    def plan_round(self, params: HistogramParams, state: HistogramState, round_index: int) -> RoundPlan | None:
        if state.done:
            return None
        task = HistogramTask(buckets=params.buckets, other_bucket=params.other_bucket,
                             max_contributions=params.max_contributions_per_device)
        l1, l2 = self.task_sensitivity(task)
        return RoundPlan(round=round_index, task=self.task_json(task), dim=len(params.slots), max_abs=1, l1_sensitivity=l1, l2_sensitivity=l2)

    def task_sensitivity(self, task: HistogramTask) -> tuple[float, float]:
        """At most `max_contributions` slots set to 1: L1 k, L2 √k."""
        k = task.max_contributions
        return float(k), float(k) ** 0.5

    def contribute(self, task: HistogramTask, rows: list[Any], rng: np.random.Generator) -> np.ndarray:
        t = task
        buckets, other, k = t.buckets, t.other_bucket, t.max_contributions
        index = {b: i for i, b in enumerate(buckets)}
        other_slot = len(buckets) if other is not None else None
        counts: Counter[int] = Counter()
        for row in rows:
            text = _value_text(row)
            if text is None:
                continue
            slot = index.get(text, other_slot)
            if slot is not None:
                counts[slot] += 1
        vec = np.zeros(len(buckets) + (other_slot is not None), dtype=np.int64)
        chosen = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
        for slot, _ in chosen:
            vec[slot] = 1
        return vec

    def validity(self, task: HistogramTask) -> Statement:
        """Every slot 0 or 1, at most `max_contributions` of them 1."""
        t = task
        return Statement((Bits(t.dim, t.max_contributions),))

    def decode_round(
        self,
        params: HistogramParams,
        state: HistogramState,
        plan: RoundPlan,
        aggregate: np.ndarray,
        contributors: int,
        noise: AggregateNoise | None = None,
    ) -> HistogramState:
        agg = np.asarray(aggregate, dtype=np.int64)
        if agg.shape != (plan.dim,):
            raise QueryKindError(f"aggregate: expected length {plan.dim}, got {agg.shape}")
        if params.release_threshold is not None:
            tau = params.release_threshold
        else:
            tau = release_threshold(noise, contributors, plan.dim, params.false_release_rate, params.min_release_count)
        std = 0.0 if noise is None else float(noise.std)
        return HistogramState(done=True, raw=agg.tolist(), contributors=contributors, threshold=tau, noise_std=std)

    def preview(self, params: HistogramParams, rounds: list[RoundPreview]) -> tuple[list[ExpectedValue], list[ReleaseWarning]]:
        """Every bucket's count carries the round's noise std; buckets under the release threshold are
        suppressed (the threshold is estimated from the std with a normal tail)."""
        if not rounds:
            return [], []
        std = rounds[0].std
        slots = params.slots
        values = [ExpectedValue(value_path("counts", b), std) for b in slots[:PREVIEW_LISTED]]
        if len(slots) > PREVIEW_LISTED:
            values.append(ExpectedValue(value_path("counts", slots[PREVIEW_LISTED]), std,
                                        f"the same for the other {len(slots) - PREVIEW_LISTED} buckets"))
        warnings = []
        if std > 0:
            tau = params.release_threshold
            if tau is None:
                tau = count_threshold(std, len(slots), params.false_release_rate, params.min_release_count)
            warnings.append(ReleaseWarning(None, f"counts below about {tau:.4g} are suppressed (listed, not released): "
                                                 f"noise std {std:.4g} per bucket; a count needs about {2 * 1.96 * std:.4g} "
                                                 "devices before its 95 % interval is narrower than itself"))
        return values, warnings

    def finalize(self, params: HistogramParams, state: HistogramState, stop_reason: str | None = None) -> Release:
        counts: dict[str, int] = {}
        suppressed: list[str] = []
        for name, value in zip(params.slots, state.raw):
            if state.threshold is not None and value >= state.threshold:
                counts[name] = int(value)
            else:
                suppressed.append(name)
        result = {
            "counts": counts,
            "suppressed": suppressed,
            "clients": int(state.contributors),
            "threshold": state.threshold,
        }
        noise_std = {value_path("counts", name): state.noise_std for name in counts} if state.noise_std else {}
        # released because it reached the threshold: the interval is conditional on that (queries/selective.py)
        intervals = {value_path("counts", name): released_interval(float(v), state.noise_std, state.threshold)
                     for name, v in counts.items()} if state.noise_std else {}
        advice = ("raise privacy.epsilon, lower max_contributions_per_device, or include more devices "
                  "(cohort.min_clients)")
        return Release(result, {"release_threshold": state.threshold}, noise_std, intervals=intervals, advice=advice)

    def tabulate(self, result: dict[str, Any]) -> list[ResultTable]:
        """One row per bucket: released counts, then the suppressed buckets (count None); bars of the counts."""
        counts = result.get("counts") or {}
        suppressed = [b for b in result.get("suppressed") or [] if b not in counts]
        rows = [{"bucket": Cell(b), "count": num_cell(v, "counts", b), "suppressed": Cell(False)} for b, v in counts.items()]
        rows += [{"bucket": Cell(b), "count": Cell(None), "suppressed": Cell(True)} for b in suppressed]
        caption = f"{result.get('clients')} contributors"
        if result.get("threshold") is not None:
            caption += f"; counts below the release threshold {result['threshold']:g} are suppressed"
        return [ResultTable("counts", None, (Column("bucket", "bucket", "key"), Column("count", "count", "value"),
                                             Column("suppressed", "suppressed", "text")),
                            tuple(rows), Chart("bar", "bucket", ("count",)), caption)]
