"""The analyst's `params` for a `training` query (pydantic) and their resolution against the model.

`TrainingParams` validates the shape of every field; `resolve(params)` builds the model and turns the
name-or-index forms (initial steps, change caps, projections) into per-weight vectors, checking that
they fit the model — both run when the spec is parsed, so a bad spec is refused with the field named.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError, ValidationError

from queries.kind import QueryKindError
from queries.training.blackbox import BlackBoxModel, known_blackbox, get_blackbox
from queries.training.limits import (
    MAX_BATCH_SIZE,
    MAX_CLASSES,
    MAX_CLIENTS,
    MAX_EPOCHS,
    MAX_EVAL_EVERY,
    MAX_EXAMPLES,
    MAX_FEATURES,
    MAX_HIDDEN,
    MAX_L2,
    MAX_MODEL_PARAMS,
    MAX_NAME_CHARS,
    MAX_ROUNDS,
    MAX_SAFEGUARD_GROUPS,
    MAX_SEED,
    MIN_CLIP_NORM,
    MIN_SHARE,
)
from queries.training.models import Model, build_model, known_models

Name = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME_CHARS)]
WeightRef = Annotated[int, Field(ge=0, lt=MAX_MODEL_PARAMS)] | Name
"""A weight by index or by name (black-box models' names; white-box weights are w0, w1, …)."""
FloatList = Annotated[list[float], Field(max_length=MAX_MODEL_PARAMS)]
FloatByName = Annotated[dict[Name, float], Field(max_length=MAX_MODEL_PARAMS)]
PerWeight = float | FloatList | FloatByName
"""One value for all weights, one per weight, or by parameter name (others keep the default)."""
_MODEL_DIMS = ("n_features", "n_classes", "hidden", "activation", "l2")


def _model_names(schema: dict[str, Any]) -> None:
    """The registered model names as the JSON schema's enum (read when the schema is generated)."""
    schema["enum"] = sorted(set(known_models()) | set(known_blackbox()))


class ModelSpec(BaseModel):
    """`name` picks a registered model; the built-in models' dimensions are declared (and bounded) here, other
    keys go to the model's factory unchanged (models added with `register_model` may read their own)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False, strict=True)

    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS, json_schema_extra=_model_names)
    n_features: int | None = Field(default=None, ge=1, le=MAX_FEATURES)
    """Inputs of logistic, linear, softmax and mlp."""
    n_classes: int | None = Field(default=None, ge=2, le=MAX_CLASSES)
    """Classes of softmax and mlp."""
    hidden: int | None = Field(default=None, ge=1, le=MAX_HIDDEN)
    """Hidden units of mlp (default 32)."""
    activation: Literal["tanh", "relu"] | None = None
    """mlp's activation (default tanh)."""
    l2: float | None = Field(default=None, ge=0)
    """L2 penalty on the non-bias weights (default 0; a training spec takes at most `MAX_L2`)."""
    initial_weights: FloatList | FloatByName | None = None
    """Start from these weights (a full list, or by name for black-box models) instead of the default."""
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    """Seed of the (simulation-grade) random initialisation of models that need one (mlp)."""

    @model_serializer(mode="wrap")
    def _omit_unset_dims(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Dimensions left out stay out of the dump (the factories apply their own defaults)."""
        data: dict[str, Any] = handler(self)
        for key in _MODEL_DIMS:
            if data.get(key) is None:
                data.pop(key, None)
        return data


class ClientSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    epochs: int = Field(default=1, ge=1, le=MAX_EPOCHS)
    batch_size: int = Field(default=0, ge=0, le=MAX_BATCH_SIZE)
    """0 = the whole local data set in one batch (E=1, B=0 is FedSGD)."""
    lr: float = Field(default=0.1, gt=0, le=1e6)
    max_examples: int = Field(default=1000, ge=1, le=MAX_EXAMPLES)
    """Cap on examples a device trains on and on its weight (examples mode)."""


class FedAvgSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)
    name: Literal["fedavg"]
    lr: float = Field(default=1.0, gt=0, le=1e6)


class AdamSpec(BaseModel):
    """FedAdam of Reddi et al. (2021): Adam on the averaged update, adaptivity τ, no bias correction. The default
    lr 0.1 is tuned on label-skewed digits (100 devices, 2 local epochs: within 1 point of central training for
    lr 0.05–0.2, docs/training.md); Adam's step is ≈ lr per weight whatever the update's scale."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)
    name: Literal["adam"]
    lr: float = Field(default=0.1, gt=0, le=1e6)
    beta1: float = Field(default=0.9, ge=0, lt=1)
    beta2: float = Field(default=0.99, ge=0, lt=1)
    tau: float = Field(default=1e-3, gt=0)
    bias_correction: bool = False


class RPropSpec(BaseModel):
    """Rprop on the sign of the aggregate (Hartmann, "Federated Learning", MSc thesis, FU Berlin 2018, §3.5,
    §4.4; defaults η+=1.2, η−=0.5 of Igel & Hüsken)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)
    name: Literal["rprop"]
    initial_step: PerWeight = 0.01
    increase: float = Field(default=1.2, gt=1)
    decrease: float = Field(default=0.5, gt=0, lt=1)
    step_min: float = Field(default=1e-6, gt=0)
    step_max: PerWeight = 50.0
    """Largest step (one value, one per weight, or by name)."""
    votes: Literal["sign", "clipped"] = "sign"
    """sign: devices send a vote in {−1, 0, +1} per weight; clipped: the clipped update, like fedavg."""



ServerOptimizer = Annotated[FedAvgSpec | AdamSpec | RPropSpec, Field(discriminator="name")]


class AdaptiveClippingSpec(BaseModel):
    """The clip norm follows a private quantile of the devices' update norms (Andrew, Thakkar, McMahan,
    Ramaswamy, "Differentially Private Learning with Adaptive Clipping", NeurIPS 2021): with its clipped
    update every device sends the bit 1[‖Δ‖ ≤ C], the server sums the bits under the same secure aggregation
    and noise, and moves C geometrically towards the target quantile, C ← C·exp(−lr·(b̄ − target_quantile)).
    The first training round sends a noisy histogram of the norms on a log₂ grid around `clip_norm` instead
    (the warm start), so that short queries need no hand-set clip norm either."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)
    target_quantile: float = Field(default=0.5, gt=0, lt=1)
    """γ: the share of devices whose update should pass unclipped."""
    learning_rate: float = Field(default=0.2, gt=0, le=10)
    """η_C of the geometric update."""
    count_share: float = Field(default=0.5, ge=MIN_SHARE, le=4)
    """Scale of the bit (and histogram) entries relative to the update's full scale, in [0.01, 4]: the bits' noise, in
    devices, is about z·√(1 + share²)/share, and the update's sensitivity grows by √(1 + share²)."""
    warm_start: bool = True
    """First training round: the norm histogram instead of one bit (`encoding.NORM_OCTAVES`)."""


class SafeguardSpec(BaseModel):
    """Applied to every round's new weights (Hartmann et al., "Federated Learning for Ranking Browser History
    Suggestions", 2019, §5.6), in this order: change cap, then projections."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)
    max_change: PerWeight | None = None
    """Largest |Δθ_i| one round may apply."""
    nonnegative: bool | Annotated[list[WeightRef], Field(max_length=MAX_MODEL_PARAMS)] = False
    """True: every weight ≥ 0; a list: these weights (index or name)."""
    ordered_groups: list[Annotated[list[WeightRef], Field(max_length=MAX_MODEL_PARAMS)]] = Field(
        default_factory=list, max_length=MAX_SAFEGUARD_GROUPS
    )
    """Each group must stay non-increasing in the listed order (e.g. newest bucket first ≥ … ≥ oldest)."""


class TrainingParams(BaseModel):
    model_config = ConfigDict(
        extra="forbid", allow_inf_nan=False, strict=True,
        json_schema_extra={"examples": [{"model": {"name": "logistic", "n_features": 3}, "rounds": 10}]},
    )
    CONTRIBUTION_BOUND: ClassVar[tuple[str, ...]] = ("precision_bits",)
    """Params that bound one device's vector (named when a noise plan does not fit the devices)."""

    model: ModelSpec
    rounds: int = Field(ge=1, le=MAX_ROUNDS)
    """Training rounds (evaluation and label-count rounds come on top, see rounds_upper_bound)."""
    clients_per_round: int | None = Field(default=None, ge=1, le=MAX_CLIENTS)
    """Minimum contributors of a round (overrides cohort.min_clients)."""
    sample_rate: float = Field(default=1.0, gt=0, le=1)
    """Bernoulli sampling of checked-in devices per round (what DP accounting amplifies with)."""
    features: list[Name] | None = Field(default=None, min_length=1, max_length=MAX_FEATURES)
    """Feature order for dict rows `{"x": {name: value}}` (and the order of list rows when scaling)."""
    scaling: dict[Name, Any] | None = Field(default=None, max_length=MAX_FEATURES)
    """A feature_stats result's `features` block (or the whole result): standardise by name on device."""
    client: ClientSpec = Field(default_factory=ClientSpec)
    server_optimizer: ServerOptimizer = Field(default_factory=lambda: FedAvgSpec(name="fedavg"))
    clip_norm: float = Field(default=1.0, ge=MIN_CLIP_NORM, le=1e9)
    """L2 clip of one device's update (before weighting), in [1e-9, 1e9]; with `adaptive_clipping`, the starting
    value."""
    adaptive_clipping: AdaptiveClippingSpec | None = None
    """Clip at a private quantile of the update norms instead of a fixed `clip_norm` (the default under
    distributed DP when neither is set, see `TrainingKind.bind_privacy`)."""
    weighting: Literal["examples", "uniform"] = "examples"
    """examples: weight min(n, max_examples)/max_examples; uniform: every device 1 (the default under DP).
    Evaluation rounds weight devices the same way."""
    precision_bits: int = Field(default=20, ge=4, le=40)
    """A clipped update's largest coordinate maps to 2^precision_bits (fixed point)."""
    weight_share: float = Field(default=0.25, ge=MIN_SHARE, le=1)
    """The weight entry's scale relative to the update's, in [0.01, 1] (keeps the update dominant in sensitivity)."""
    eval_every: int = Field(default=5, ge=0, le=MAX_EVAL_EVERY)
    """Evaluate before training, every eval_every training rounds and after the last; 0 = never."""
    patience: int | None = Field(default=None, ge=1, le=MAX_EVAL_EVERY)
    """Stop after this many evaluations without improvement of the eval loss (keeping the best weights)."""
    min_delta: float = Field(default=0.0, ge=0)
    holdout_fraction: float = Field(default=0.2, ge=0, le=0.9)
    """Share of each device's rows (chosen by a hash of the row) kept out of training for evaluation; 0 =
    evaluate on the training rows."""
    loss_cap: float = Field(default=10.0, gt=0)
    """Per-example loss is clipped to this in evaluation reports (bounds a device's contribution)."""
    class_weighting: bool = False
    """First round sums label counts securely; training then weights classes n/(K·n_k) ("balanced"). Only for a
    model with classes (logistic, softmax, mlp): not for linear, nor for a black-box model, which has none."""
    safeguards: SafeguardSpec = Field(default_factory=SafeguardSpec)

    @field_validator("model")
    @classmethod
    def _bounded_l2(cls, model: ModelSpec) -> ModelSpec:
        """`model.l2` ≤ MAX_L2, checked here rather than in `ModelSpec`, whose schema the devices' task schemas share."""
        if model.l2 is not None and model.l2 > MAX_L2:
            error = InitErrorDetails(type=PydanticCustomError("less_than_equal", "Input should be less than or equal to "
                                                              "{le}", {"le": MAX_L2}), loc=("l2",), input=model.l2)
            raise ValidationError.from_exception_data(cls.__name__, [error])
        return model

    @field_validator("class_weighting")
    @classmethod
    def _needs_classes(cls, value: bool, info: ValidationInfo) -> bool:
        """Class weighting counts labels over the model's classes: refused, naming this field, for a model without
        any (a black-box model, a regression model). `model` is validated first; when it is invalid its own error
        is the one reported."""
        model = info.data.get("model")
        if not value or not isinstance(model, ModelSpec):
            return value
        if model.name in known_blackbox():
            raise PydanticCustomError("class_weighting", "needs a model with classes (a black-box model has none)")
        try:
            classes = build_model(model.model_dump()).n_classes  # dimensions only, nothing allocated
        except (QueryKindError, ValueError, TypeError):
            return value  # a bad model: `resolve` names its field
        if classes is None:
            raise PydanticCustomError("class_weighting", "needs a model with classes (model {name} has none)",
                                      {"name": repr(model.name)})
        return value

    @model_validator(mode="after")
    def _resolve(self) -> TrainingParams:
        if self.adaptive_clipping is not None and isinstance(self.server_optimizer, RPropSpec) and self.server_optimizer.votes == "sign":
            raise ValueError("adaptive_clipping: sign votes are not clipped (use server_optimizer.votes 'clipped')")
        resolve(self)  # raises ValueError (QueryKindError) naming the field
        return self


class WeightNames(Sequence[str]):
    """The names of a model's weights with O(1) lookup: a black-box model's own names, or w0 … w{n−1} for
    white-box models (computed on demand, never listed, so resolving a large model allocates no names)."""

    def __init__(self, n: int, names: Sequence[str] | None = None) -> None:
        self.n = n
        self._names = list(names) if names is not None else None
        self._index = {name: i for i, name in enumerate(self._names)} if self._names is not None else None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> str:  # type: ignore[override]
        if not -self.n <= i < self.n:
            raise IndexError(i)
        return self._names[i] if self._names is not None else f"w{i % self.n}"

    def __iter__(self) -> Iterator[str]:
        return iter(self._names) if self._names is not None else (f"w{i}" for i in range(self.n))

    def find(self, name: str) -> int | None:
        """Index of `name`, or None."""
        if self._index is not None:
            return self._index.get(name)
        if len(name) > 1 and name[0] == "w" and name[1:].isdigit() and (name[1] != "0" or name == "w0"):
            i = int(name[1:])
            return i if i < self.n else None
        return None

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.find(name) is not None

    def index(self, name: str, *_: Any) -> int:
        i = self.find(name)
        if i is None:
            raise ValueError(f"{name!r} is not a weight name")
        return i


@dataclass(frozen=True)
class Resolved:
    model: Model | BlackBoxModel
    blackbox: bool
    param_names: list[str] | WeightNames
    """A list for black-box models (reported in the result); `WeightNames` (w0, w1, …) otherwise."""
    initial: np.ndarray
    max_change: np.ndarray | None
    nonnegative: np.ndarray  # indices
    groups: list[np.ndarray]
    rprop_initial_step: np.ndarray | None
    rprop_step_max: np.ndarray | None
    scaling: dict[str, Any] | None
    feature_names: list[str] | None = None
    """Feature order of dict rows: `params.features`, or the scaling block's order."""

    @property
    def n_params(self) -> int:
        return len(self.initial)


def _per_weight(value: PerWeight, names: WeightNames, default: float, field: str, positive: bool) -> np.ndarray:
    n = len(names)
    if isinstance(value, (int, float)):
        out = np.full(n, float(value))
    elif isinstance(value, list):
        if len(value) != n:
            raise ValueError(f"{field}: expected {n} values (one per weight), got {len(value)}")
        out = np.asarray(value, dtype=np.float64)
    else:
        out = np.full(n, float(default))
        for key, v in value.items():
            i = names.find(key)
            if i is None:
                raise ValueError(f"{field}: unknown weight name {key[:MAX_NAME_CHARS]!r}")
            out[i] = float(v)
    if not np.all(np.isfinite(out)) or np.any(out <= 0 if positive else out < 0):
        raise ValueError(f"{field}: values must be finite and {'> 0' if positive else '≥ 0'}")
    return out


def _index(ref: int | str, names: WeightNames, field: str) -> int:
    if isinstance(ref, str):
        i = names.find(ref)
        if i is None:
            raise ValueError(f"{field}: unknown weight name {ref[:MAX_NAME_CHARS]!r}")
        return i
    if not 0 <= ref < len(names):
        raise ValueError(f"{field}: weight index {ref} out of range [0, {len(names)})")
    return ref


def _scaling_block(params: TrainingParams) -> dict[str, Any] | None:
    """The scaler from `params.scaling`: a feature_stats result's `features` block, the whole result, or the
    whole answer of `GET /v1/queries/{id}/result` (`fa result ID --format json`). The feature order is
    `params.features`, else the result's `scaler.feature_names_in_` (the feature_stats query's order), else the
    block's key order."""
    if params.scaling is None:
        return None
    block: Any = params.scaling
    if isinstance(block.get("result"), dict):
        block = block["result"]
    scaler = block.get("scaler")
    order = scaler.get("feature_names_in_") if isinstance(scaler, dict) else None  # a list keeps its order when
    block = block.get("features", block)  # the JSON was written with sorted keys (`fa … --format json` does)
    if not isinstance(block, dict):
        raise ValueError("scaling.features: must be an object {feature: {mean, std}} (a feature_stats result's block)")
    if params.features is not None:
        names = list(params.features)
    elif isinstance(order, list) and all(isinstance(n, str) for n in order):
        names = list(order)
    else:
        names = [str(n) for n in block]
    if not names:
        raise ValueError("scaling: no features in the feature_stats block")
    missing = [n for n in names if not isinstance(block.get(n), dict) or "mean" not in block[n]]
    if missing:
        raise ValueError(f"scaling: no mean/std for feature(s) {', '.join(missing[:10])} in the feature_stats block")
    means, stds = [], []
    for n in names:
        mean, std = block[n]["mean"], block[n].get("std") or 0.0
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (mean, std)):
            raise ValueError(f"scaling: mean and std of feature {n!r} must be numbers")
        if not (math.isfinite(mean) and math.isfinite(std)):
            raise ValueError(f"scaling: mean and std of feature {n!r} must be finite")
        means.append(float(mean))
        stds.append(float(std))
    return {
        "feature_names_in_": names,
        "mean_": means,
        "scale_": [s if s > 0 else 1.0 for s in stds],
    }


def resolve(params: TrainingParams) -> Resolved:
    name = params.model.name
    blackbox = name in known_blackbox()
    model: Model | BlackBoxModel
    if blackbox:
        model = get_blackbox(name)
        names = WeightNames(len(model.param_names), model.param_names)
        initial = np.asarray(model.initial_weights, dtype=np.float64)
    else:
        model = build_model(params.model.model_dump())  # refuses more than MAX_MODEL_PARAMS before allocating
        names = WeightNames(model.n_params)
        scaler = _scaling_block(params)
        feature_names = params.features if params.features is not None else (scaler or {}).get("feature_names_in_")
        if feature_names is not None and len(feature_names) != getattr(model, "n_features", len(feature_names)):
            what = "features" if params.features is not None else "scaling"
            raise ValueError(f"{what}: {len(feature_names)} feature names but model.n_features is {getattr(model, 'n_features')}")
        if params.class_weighting and model.n_classes is None:
            raise ValueError("class_weighting: needs a classifier model")
        initial = model.initial_weights(np.random.default_rng(params.model.seed))
    iw = params.model.initial_weights
    if isinstance(iw, list):
        if len(iw) != len(names):
            raise ValueError(f"model.initial_weights: expected {len(names)} values, got {len(iw)}")
        initial = np.asarray(iw, dtype=np.float64)
    elif isinstance(iw, dict):
        initial = initial.copy()
        for key, v in iw.items():
            initial[_index(key, names, "model.initial_weights")] = float(v)
    if not np.all(np.isfinite(initial)):
        raise ValueError("model.initial_weights: must be finite")

    sg = params.safeguards
    max_change = None if sg.max_change is None else _per_weight(sg.max_change, names, math.inf, "safeguards.max_change", True)
    if sg.nonnegative is True:
        nonneg = np.arange(len(names))
    elif sg.nonnegative is False:
        nonneg = np.arange(0)
    else:
        nonneg = np.asarray(sorted({_index(r, names, "safeguards.nonnegative") for r in sg.nonnegative}), dtype=np.int64)
    groups = []
    grouped: set[int] = set()
    for g, group in enumerate(sg.ordered_groups):
        idx = [_index(r, names, f"safeguards.ordered_groups[{g}]") for r in group]
        if len(set(idx)) != len(idx) or len(idx) < 2:
            raise ValueError(f"safeguards.ordered_groups[{g}]: needs at least two distinct weights")
        shared = grouped.intersection(idx)
        if shared:
            raise ValueError(f"safeguards.ordered_groups[{g}]: shares weight(s) {sorted(shared)[:10]} with an earlier group")
        grouped.update(idx)
        groups.append(np.asarray(idx, dtype=np.int64))
    if np.any(initial[nonneg] < 0):
        raise ValueError("model.initial_weights: violate safeguards.nonnegative")
    for g, members in enumerate(groups):
        if np.any(np.diff(initial[members]) > 0):
            raise ValueError(f"model.initial_weights: violate safeguards.ordered_groups[{g}] (must be non-increasing)")

    opt = params.server_optimizer
    steps = step_max = None
    if isinstance(opt, RPropSpec):
        steps = _per_weight(opt.initial_step, names, 0.01, "server_optimizer.initial_step", True)
        step_max = _per_weight(opt.step_max, names, 50.0, "server_optimizer.step_max", True)
        if np.any(step_max < opt.step_min):
            raise ValueError(f"server_optimizer.step_max: must not be below step_min ({opt.step_min})")
        steps = np.clip(steps, opt.step_min, step_max)
    param_names: list[str] | WeightNames = list(names) if blackbox else names
    scaling = _scaling_block(params)
    return Resolved(model, blackbox, param_names, initial, max_change, nonneg, groups, steps, step_max, scaling,
                    params.features if params.features is not None else (scaling or {}).get("feature_names_in_"))
