"""The typed round task of the `training` kind: a union tagged by `phase` (label_counts, train, eval), each a strict
pydantic model (unknown keys, `True`, `3.7` or `"3"` for an integer, non-finite numbers and oversize lists refused).
`TrainingKind.plan_round` builds it, `TrainingKind.parse_task` is the one parser, and the device side
(`queries.training.client`) reads the parsed task only. Its JSON Schema is the TypeScript SDK's (tests/vectors)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, StringConstraints, model_validator

from queries.training import encoding
from queries.training.limits import MAX_CLASSES, MAX_FEATURES, MAX_MODEL_PARAMS, MAX_NAME_CHARS
from queries.training.params import ClientSpec, ModelSpec

Name = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME_CHARS)]
Weights = Annotated[list[float], Field(max_length=MAX_MODEL_PARAMS)]
MAX_METRICS = 1000
"""Most metrics an evaluation round reports (a black-box model's own, by name)."""
CLIP_ENTRIES = (0, 1, encoding.NORM_BUCKETS)
"""Adaptive clipping's entries in a training round: none, the unclipped bit, or the norm histogram."""

_STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class Scaler(BaseModel):
    """The standard scaler from a feature_stats result (`params._scaling_block`): per feature, mean_ and scale_."""

    model_config = _STRICT

    feature_names_in_: list[Name] = Field(min_length=1, max_length=MAX_FEATURES)
    mean_: list[float] = Field(max_length=MAX_FEATURES)
    scale_: list[Annotated[float, Field(gt=0)]] = Field(max_length=MAX_FEATURES)

    @model_validator(mode="after")
    def _per_feature(self) -> Scaler:
        n = len(self.feature_names_in_)
        if len(self.mean_) != n or len(self.scale_) != n:
            raise ValueError(f"scaling: mean_ and scale_ must have one entry per feature ({n})")
        return self


class _PhaseTask(BaseModel):
    """What every phase's task carries: the model, local training settings, fixed-point precision, the hold-out
    share, and the rows' preparation (feature order, scaler, class weights)."""

    model_config = _STRICT

    model: ModelSpec
    client: ClientSpec
    precision_bits: int = Field(ge=4, le=40)
    holdout_fraction: float = Field(ge=0, le=0.9)
    features: list[Name] | None = Field(max_length=MAX_FEATURES)
    scaling: Scaler | None
    class_weights: list[Annotated[float, Field(ge=0)]] | None = Field(max_length=MAX_CLASSES)


class LabelCountsTask(_PhaseTask):
    """The label-count round (class weighting): each device's label shares over `n_classes`."""

    phase: Literal["label_counts"]
    n_classes: int = Field(ge=2, le=MAX_CLASSES)


class TrainTask(_PhaseTask):
    """A training round: the weights, the clip norm, sign votes or clipped updates and their weighting, and the
    adaptive-clipping entries (0, 1 or `encoding.NORM_BUCKETS`) with their share."""

    phase: Literal["train"]
    weights: Weights
    clip_norm: float = Field(gt=0)
    votes: Literal["sign", "update"]
    weighting: Literal["examples", "uniform"]
    weight_share: float = Field(gt=0, le=1)
    # the schema says `enum` (the TS SDK checks that); here the validator below enforces it (a Literal would take True)
    clip_entries: int = Field(ge=0, le=encoding.NORM_BUCKETS, json_schema_extra={"enum": list(CLIP_ENTRIES)})
    count_share: float = Field(ge=0, le=4)

    @model_validator(mode="after")
    def _clip_entries(self) -> TrainTask:
        if self.clip_entries not in CLIP_ENTRIES:
            raise ValueError(f"clip_entries: must be one of {', '.join(map(str, CLIP_ENTRIES))}, got {self.clip_entries}")
        return self


class EvalTask(_PhaseTask):
    """An evaluation round: the weights, the per-example loss cap, the metrics' names and the weighting."""

    phase: Literal["eval"]
    weights: Weights
    loss_cap: float = Field(gt=0)
    metrics: list[Name] = Field(max_length=MAX_METRICS)
    weighting: Literal["examples", "uniform"]


PhaseTask = LabelCountsTask | TrainTask | EvalTask


class TrainingTask(RootModel[Annotated[PhaseTask, Field(discriminator="phase")]]):
    """A training round's task, by `phase`: label_counts, train or eval."""
