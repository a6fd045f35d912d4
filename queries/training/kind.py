"""The `training` query kind: federated training rounds, federated evaluation, early stopping.

Round sequence (all state in `TrainingState`, stored after every round, so a restarted server resumes
from the last decoded round):
  [label_counts]  when class_weighting: one round summing per-class example shares → class weights;
  eval            before training (baseline), every `eval_every` training rounds and after the last;
  train × rounds  devices train locally, send one clipped+quantised update (or sign votes); the server
                  averages, applies its optimiser, then the safeguards.
Early stopping: after `patience` evaluations whose eval loss did not beat the best by `min_delta`, the
query finishes and keeps the best evaluated weights. `finalize` works from any state; when the server
stopped the query early (`stop_reason`, e.g. the privacy budget), the result says so and keeps the best
evaluated weights. Vector layouts: `queries.training.encoding`.

Noisy evaluations (docs/training.md, "Under DP"): every released loss, accuracy and metric carries its
noise std and 95 % interval, is clamped to its possible range, and model selection only prefers an earlier
evaluation when it was better by more than the noise allows. Divergence — an update or weights that are not
finite, a loss that is not finite or explodes (beyond `DIVERGENCE_FACTOR` × the best and beyond its noise),
an accuracy outside [0, 1] by more than its noise — ends the query with stop_reason "diverged" and a
`Release.failure`: the server marks it failed, with the last good weights readable in the result.
Adaptive clipping (`params.AdaptiveClippingSpec`) moves the clip norm every training round.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

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
from queries.spec import PrivacySpec
from queries.table import Cell, Chart, Column, ResultTable, num_cell
from queries.training import client, encoding
from queries.training.blackbox import BlackBoxModel
from queries.training.optimizers import adam_step, apply_safeguards, fedavg_step, initial_optimizer_state, rprop_step
from queries.training.params import AdamSpec, FedAvgSpec, Resolved, RPropSpec, TrainingParams, resolve
from queries.training.task import EvalTask, LabelCountsTask, PhaseTask, Scaler, TrainingTask, TrainTask
from secagg.validity.statement import Ranged, Segment, Signs, Statement

Phase = Literal["label_counts", "eval", "train", "done"]
DIVERGENCE_FACTOR = 3.0
"""An evaluation loss above this multiple of the best one (and beyond both their noise) means divergence."""
NOISE_Z = 4.0
"""How many noise stds a value may stray before it counts as impossible (accuracy outside [0, 1], a loss jump)."""
SELECTION_Z = 2.0
"""An earlier evaluation is kept as the best only when better by more than this many stds of the difference."""
MAX_CLIP_NORM = 1e9


@dataclass(frozen=True)
class BestEval:
    round: int
    eval_loss: float
    weights: list[float]


@dataclass(frozen=True)
class TrainingState:
    phase: Phase
    weights: list[float]
    opt: dict[str, Any]
    """Server optimiser state (Adam m/v/t, Rprop step/prev_sign; empty for fedavg)."""
    t: int = 0
    """Training rounds applied."""
    class_weights: list[float] | None = None
    label_shares: list[float] | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    """One entry per evaluation: round, loss (only with a holdout), eval_loss, clients, accuracy?, metrics…"""
    best: BestEval | None = None
    bad_evals: int = 0
    stop_reason: str | None = None
    """The kind's own reason to stop (early_stopping, diverged)."""
    contributors: list[int] = field(default_factory=list)
    clip_norm: float | None = None
    """The current clip norm under adaptive clipping (None: params.clip_norm)."""
    clip_history: list[float] = field(default_factory=list)
    """The clip norm each training round used (adaptive clipping)."""
    eval_noise: list[dict[str, float]] = field(default_factory=list)
    """Per history entry, the noise std of its noisy values (empty dicts without noise)."""
    min_eval_loss: float | None = None
    divergence: dict[str, Any] | None = None
    """{round, reason} when the query diverged."""


def _metric_names(res: Resolved) -> list[str]:
    return list(res.model.metrics) if isinstance(res.model, BlackBoxModel) else []


def _n_classes(res: Resolved) -> int:
    """The classes the label-count round counts over (`TrainingParams` refuses class_weighting for a model without
    any, so this only guards stored params of a model that changed since)."""
    k = None if isinstance(res.model, BlackBoxModel) else res.model.n_classes
    if k is None:
        raise QueryKindError("params.class_weighting: needs a model with classes")
    return int(k)


def _uses_votes(params: TrainingParams) -> bool:
    opt = params.server_optimizer
    return isinstance(opt, RPropSpec) and opt.votes == "sign"


def _clip_entries(params: TrainingParams, t: int) -> int:
    spec = params.adaptive_clipping
    if spec is None:
        return 0
    return encoding.NORM_BUCKETS if spec.warm_start and t == 0 else 1

BREAST_CANCER_FEATURES = [
    "mean_radius", "mean_texture", "mean_perimeter", "mean_area", "mean_smoothness", "mean_compactness",
    "mean_concavity", "mean_concave_points", "mean_symmetry", "mean_fractal_dimension", "radius_error",
    "texture_error", "perimeter_error", "area_error", "smoothness_error", "compactness_error", "concavity_error",
    "concave_points_error", "symmetry_error", "fractal_dimension_error", "worst_radius", "worst_texture",
    "worst_perimeter", "worst_area", "worst_smoothness", "worst_compactness", "worst_concavity",
    "worst_concave_points", "worst_symmetry", "worst_fractal_dimension",
]
"""scikit-learn's breast cancer feature names (spaces as underscores), as `fa-sim --scenario breast_cancer*`
stores them."""


TRAINING_TEMPLATE = KindTemplate(
    "training: logistic regression on breast cancer over 50 label-skewed devices (FedAvg); pass a "
    "feature_stats result as params.scaling",
    {
        "kind": "training",
        "name": "breast cancer logistic",
        "source": "examples",
        "params": {
            "model": {"name": "logistic", "n_features": 30, "l2": 0.0025},
            "features": BREAST_CANCER_FEATURES,
            "rounds": 10,
            "client": {"epochs": 1, "batch_size": 0, "lr": 1.0},
            "server_optimizer": {"name": "fedavg", "lr": 3.0},
            "clip_norm": 10.0,
            "eval_every": 5,
            "holdout_fraction": 0.0,
        },
        "privacy": {"mechanism": "none"},
        "cohort": {"min_clients": 45, "max_clients": 50, "phase_timeout_s": 30},
    },
    {
        "params.model": "logistic, softmax or mlp (numpy), or a registered black-box scoring function",
        "params.features": "feature order of dict rows {x: {name: value}, y: label}",
        "params.rounds": "model updates (evaluation rounds come on top)",
        "params.client": "local training on each device: epochs over its rows, batch size (0: all), "
                         "learning rate",
        "params.server_optimizer": "fedavg, adam or rprop, applied to the averaged update",
        "params.clip_norm": "L2 bound of one device's update: sets the noise",
        "privacy": "none here: exact sums of the clipped updates. For distributed DP set mechanism "
                   "discrete_gaussian with epsilon and delta, and params.weighting to uniform",
        "params.eval_every": "a federated evaluation round every this many updates (0: none)",
        "params.holdout_fraction": "share of each device's rows kept out of training for evaluation",
    },
)
"""Starter spec of `fa init training` (queries.templates)."""


class TrainingKind(QueryKind[TrainingParams, TrainingState]):
    name = "training"
    Params = TrainingParams
    State = TrainingState
    examples = (KindExample({"model": {"name": "logistic", "n_features": 3}, "rounds": 1, "eval_every": 0, "holdout_fraction": 0.0},
                            [{"x": [0.1, -0.2, 0.3], "y": 1}, {"x": [0.0, 0.5, -0.1], "y": 0}]),)
    template = TRAINING_TEMPLATE
    Task = TrainingTask
    supports_proofs = True

    def bind_privacy(self, raw_params: dict[str, Any], privacy: PrivacySpec) -> dict[str, Any]:
        """Under distributed DP, defaults that converge: `weighting` "uniform" (each device's clipped update
        counts once, so one device's influence is bounded by the clip norm alone) and, unless the analyst set
        `clip_norm` or `adaptive_clipping`, adaptive clipping (sign votes are never clipped). Without noise the
        params stay as they are."""
        if privacy.mechanism == "none" or not isinstance(raw_params, dict):
            return raw_params
        out = dict(raw_params)
        out.setdefault("weighting", "uniform")
        opt = out.get("server_optimizer")
        votes = isinstance(opt, dict) and opt.get("name") == "rprop" and opt.get("votes", "sign") == "sign"
        if "clip_norm" not in out and "adaptive_clipping" not in out and not votes:
            out["adaptive_clipping"] = {}
        return out

    # ------------------------------------------------------------------ schedule
    def n_evals(self, params: TrainingParams) -> int:
        return 0 if params.eval_every == 0 else 1 + math.ceil(params.rounds / params.eval_every)

    def rounds_upper_bound(self, params: TrainingParams) -> int:
        return int(params.class_weighting) + params.rounds + self.n_evals(params)

    def _eval_due(self, params: TrainingParams, t: int) -> bool:
        return params.eval_every > 0 and (t % params.eval_every == 0 or t == params.rounds)

    def _next_phase(self, params: TrainingParams, t: int, just_evaluated: bool) -> Phase:
        if not just_evaluated and self._eval_due(params, t):
            return "eval"
        return "done" if t >= params.rounds else "train"

    def initial_state(self, params: TrainingParams) -> TrainingState:
        res = resolve(params)
        first: Phase = "label_counts" if params.class_weighting else self._next_phase(params, 0, False)
        return TrainingState(
            phase=first,
            weights=res.initial.tolist(),
            opt=initial_optimizer_state(params.server_optimizer, res.n_params, res.rprop_initial_step),
        )

    # ------------------------------------------------------------------ planning
    def plan_round(self, params: TrainingParams, state: TrainingState, round_index: int) -> RoundPlan | None:
        phase = state.phase
        if phase == "done":
            return None
        res = resolve(params)
        common = dict(model=params.model, client=params.client, precision_bits=params.precision_bits,
                      holdout_fraction=params.holdout_fraction, features=res.feature_names,
                      scaling=None if res.scaling is None else Scaler.model_validate(res.scaling),
                      class_weights=state.class_weights)
        task: PhaseTask
        if phase == "label_counts":
            k = _n_classes(res)
            task = LabelCountsTask(phase="label_counts", n_classes=k, **common)
            b = encoding.label_bounds(k, params.precision_bits)
        elif phase == "train":
            votes = _uses_votes(params)
            weighted = params.weighting == "examples"
            entries = 0 if votes else _clip_entries(params, state.t)
            share = params.adaptive_clipping.count_share if params.adaptive_clipping else 0.0
            task = TrainTask(phase="train", weights=state.weights, clip_norm=self.clip_norm(params, state),
                             votes="sign" if votes else "update", weighting=params.weighting,
                             weight_share=params.weight_share, clip_entries=entries, count_share=share, **common)
            b = encoding.train_bounds(res.n_params, votes, weighted and not votes, params.precision_bits, params.weight_share,
                                      entries, share)
        elif phase == "eval":
            names = _metric_names(res)
            task = EvalTask(phase="eval", weights=state.weights, loss_cap=params.loss_cap, metrics=names,
                            weighting=params.weighting, **common)
            b = encoding.eval_bounds(len(names), params.precision_bits)
        else:
            raise ValueError(f"state.phase: unknown phase {phase!r}")
        return RoundPlan(
            round=round_index,
            task=self.task_json(TrainingTask(task)),
            dim=b.dim,
            max_abs=b.max_abs,
            l1_sensitivity=b.l1,
            l2_sensitivity=b.l2,
            sample_rate=params.sample_rate,
            min_clients=params.clients_per_round,
            meta={"phase": phase, "t": state.t},
            purpose={"label_counts": "label counts", "eval": "evaluation", "train": "training"}[phase],
        )

    def clip_norm(self, params: TrainingParams, state: TrainingState) -> float:
        """The clip norm of the next training round."""
        return params.clip_norm if state.clip_norm is None else state.clip_norm

    def contribute(self, task: TrainingTask, rows: list[Any], rng: np.random.Generator) -> np.ndarray:
        return client.contribute(task.root, rows, rng)

    def validity(self, task: TrainingTask) -> Statement | None:
        """What one device's vector of this round may hold (`encoding`'s layouts), entry by entry: sign votes in
        {−1, 0, +1}; a clipped update's entries in [−U, U] (an L∞ bound: the clipped update has ‖q‖₂ ≤ U + √d, so a
        cheater can reach at most √d times an honest device's L2 norm, never more), its weight in [0, W] (never
        negative: a negative weight would shrink the denominator and amplify the step) and its clip entries in
        [0, B]; evaluation entries and label shares in [0, U]."""
        t = task.root
        u = encoding.unit(t.precision_bits)
        if isinstance(t, LabelCountsTask):
            return Statement((Ranged(t.n_classes, 0, u),))
        if isinstance(t, EvalTask):
            return Statement((Ranged(encoding.eval_layout(len(t.metrics)).dim, 0, u),))
        d = len(t.weights)
        if t.votes == "sign":
            return Statement((Signs(d),))
        segments: list[Segment] = [Ranged(d, -u, u)]
        if t.weighting == "examples":
            segments.append(Ranged(1, 0, encoding.weight_unit(t.precision_bits, t.weight_share)))
        if t.clip_entries:
            segments.append(Ranged(t.clip_entries, 0, encoding.count_unit(t.precision_bits, t.count_share)))
        return Statement(tuple(segments))

    def task_sensitivity(self, task: TrainingTask) -> tuple[float, float]:
        """The phase's `encoding` bounds, from the task: the same functions `plan_round` sizes the round with."""
        t = task.root
        if isinstance(t, LabelCountsTask):
            b = encoding.label_bounds(t.n_classes, t.precision_bits)
        elif isinstance(t, TrainTask):
            votes = t.votes == "sign"
            b = encoding.train_bounds(len(t.weights), votes, t.weighting == "examples" and not votes, t.precision_bits,
                                      t.weight_share, 0 if votes else t.clip_entries, t.count_share)
        else:
            b = encoding.eval_bounds(len(t.metrics), t.precision_bits)
        return b.l1, b.l2

    # ------------------------------------------------------------------ decoding
    def decode_round(
        self,
        params: TrainingParams,
        state: TrainingState,
        plan: RoundPlan,
        aggregate: np.ndarray,
        contributors: int,
        noise: AggregateNoise | None = None,
    ) -> TrainingState:
        phase = plan.meta.get("phase", state.phase)
        if phase != state.phase or contributors <= 0:
            return state  # a stale or empty round changes nothing
        agg = np.asarray(aggregate, dtype=np.float64)
        res = resolve(params)
        new = replace(state, contributors=state.contributors + [contributors])
        cap = params.client.max_examples
        u = float(encoding.unit(params.precision_bits))
        if phase == "label_counts":
            labels = encoding.label_layout(_n_classes(res))
            shares = np.maximum(labels.view(agg / u, "aggregate")["shares"], 1e-9)
            k = len(shares)
            weights = shares.sum() / (k * shares)
            return replace(
                new,
                label_shares=(shares / shares.sum()).tolist(),
                class_weights=(weights / weights.mean()).tolist(),
                phase=self._next_phase(params, 0, False),
            )
        sigma_u = 0.0 if noise is None else float(noise.std) / u  # noise std of each entry, in units of U
        if phase == "train":
            return self._apply_update(params, res, new, agg, contributors, cap, u)
        return self._record_eval(params, res, new, agg, contributors, cap, u, sigma_u)

    def _apply_update(self, params: TrainingParams, res: Resolved, state: TrainingState, agg: np.ndarray, contributors: int, cap: int, u: float) -> TrainingState:
        d = res.n_params
        theta = np.asarray(state.weights, dtype=np.float64)
        opt = params.server_optimizer
        clip = self.clip_norm(params, state)
        next_clip = state.clip_norm
        if _uses_votes(params):
            direction = encoding.vote_layout(d).view(agg, "aggregate")["votes"]
        else:
            weighted = params.weighting == "examples"
            entries = _clip_entries(params, state.t)
            parts = encoding.update_layout(d, weighted, entries).view(agg, "aggregate")
            total = parts["update"] * clip / u
            if weighted:
                wsum = float(parts["weight"]) / encoding.weight_unit(params.precision_bits, params.weight_share)
                denom = max(wsum, 1.0 / cap)  # noisy weight: clamp at one example's worth
            else:
                denom = float(contributors)
            direction = total / denom
            if entries:
                spec = params.adaptive_clipping
                assert spec is not None
                counts = np.asarray(parts["clip"], dtype=np.float64) / encoding.count_unit(params.precision_bits, spec.count_share)
                next_clip = _next_clip(clip, counts, contributors, spec.target_quantile, spec.learning_rate)
        with np.errstate(all="ignore"):
            opt_state = state.opt
            if isinstance(opt, FedAvgSpec):
                proposal = fedavg_step(theta, direction, opt)
            elif isinstance(opt, AdamSpec):
                proposal, opt_state = adam_step(theta, direction, opt, opt_state)
            else:
                assert res.rprop_step_max is not None
                proposal, opt_state = rprop_step(theta, direction, opt, opt_state, res.rprop_step_max)
            theta_new = apply_safeguards(theta, proposal, res.max_change, res.nonnegative, res.groups)
        t = state.t + 1
        history = state.clip_history + ([clip] if params.adaptive_clipping is not None else [])
        if not np.all(np.isfinite(theta_new)):
            return self._diverged(state, t, "the weights are no longer finite after the server's update",
                                  clip_history=history)
        return replace(state, weights=theta_new.tolist(), opt=opt_state, t=t, phase=self._next_phase(params, t, False),
                       clip_norm=next_clip, clip_history=history)

    @staticmethod
    def _diverged(state: TrainingState, t: int, reason: str, **changes: Any) -> TrainingState:
        return replace(state, phase="done", stop_reason="diverged", divergence={"round": t, "reason": reason}, **changes)

    def _record_eval(
        self, params: TrainingParams, res: Resolved, state: TrainingState, agg: np.ndarray, contributors: int, cap: int,
        u: float, sigma_u: float = 0.0,
    ) -> TrainingState:
        names = _metric_names(res)
        vals = encoding.eval_layout(len(names)).view(agg / u, "aggregate")
        floor = 1.0 if params.weighting == "uniform" else 1.0 / cap  # a noisy weight: at least one device's worth
        wt, we = max(float(vals["train_weight"]), floor), max(float(vals["eval_weight"]), floor)
        lc = params.loss_cap

        def ratio(total: float, weight: float, scale: float, sums: int = 1) -> tuple[float, float]:
            """A noisy mean total/weight·scale and its delta-method std (total and weight each a sum of `sums` noisy
            entries of std σ_u)."""
            r = total / weight
            return r * scale, scale * math.sqrt(sums) * sigma_u / weight * math.sqrt(1 + r * r)

        raw: dict[str, tuple[float, float, float]] = {}  # name → (value, std, upper limit)
        if params.holdout_fraction > 0:
            raw["loss"] = (*ratio(float(vals["train_loss"]), wt, lc), lc)
            raw["eval_loss"] = (*ratio(float(vals["eval_loss"]), we, lc), lc)
        else:  # every row is both a training and an evaluation row: the two sums estimate one loss, released once
            total = float(vals["train_loss"]) + float(vals["eval_loss"])
            weight = max(float(vals["train_weight"]) + float(vals["eval_weight"]), 2 * floor)
            raw["eval_loss"] = (*ratio(total, weight, lc, sums=2), lc)
        has_acc = isinstance(res.model, BlackBoxModel) and res.model.correct is not None
        has_acc = has_acc or (not isinstance(res.model, BlackBoxModel) and res.model.n_classes is not None)
        if has_acc:
            raw["accuracy"] = (*ratio(float(vals["accuracy"]), we, 1.0), 1.0)
        if isinstance(res.model, BlackBoxModel):
            for name, value in zip(names, vals["metrics"]):
                bound = res.model.metrics[name].bound
                raw[name] = (*ratio(float(value), we, bound), bound)
        entry: dict[str, Any] = {"round": state.t}
        stds: dict[str, float] = {}
        for key, (value, std, top) in raw.items():
            entry[key] = float(min(max(value, 0.0), top)) if math.isfinite(value) else None  # JSON has no NaN
            if std > 0:
                stds[key] = std
        entry["clients"] = contributors
        history = state.history + [entry]
        noise = state.eval_noise + [stds]
        loss, loss_std = raw["eval_loss"][0], stds.get("eval_loss", 0.0)
        reason = _divergence(raw, stds, state.history, state.eval_noise)
        if reason is not None:
            return self._diverged(state, state.t, reason, history=history, eval_noise=noise)
        # model selection within the noise: the newest evaluation unless an earlier one was clearly better
        tol = SELECTION_Z * math.sqrt(2.0) * loss_std
        best, bad_evals = state.best, state.bad_evals
        min_loss = state.min_eval_loss if state.min_eval_loss is not None else (best.eval_loss if best else None)
        clamped = entry["eval_loss"]
        if best is None or min_loss is None:
            best, bad_evals = BestEval(entry["round"], clamped, state.weights), 0
        else:
            if clamped < min_loss - params.min_delta:
                bad_evals = 0
            else:
                bad_evals += 1
            if (tol > 0 and clamped <= min_loss + tol) or clamped < best.eval_loss - params.min_delta:
                best = BestEval(entry["round"], clamped, state.weights)
        min_loss = clamped if min_loss is None else min(min_loss, clamped)
        new = replace(state, history=history, eval_noise=noise, best=best, bad_evals=bad_evals, min_eval_loss=min_loss)
        if params.patience is not None and bad_evals >= params.patience:
            return replace(new, phase="done", stop_reason="early_stopping")
        return replace(new, phase=self._next_phase(params, state.t, True))

    # ------------------------------------------------------------------ result
    def finalize(self, params: TrainingParams, state: TrainingState, stop_reason: str | None = None) -> Release:
        res = resolve(params)
        best = state.best
        weights = best.weights if best else state.weights
        reason = stop_reason or state.stop_reason or ("completed" if state.phase == "done" else "interrupted")
        result = {
            "weights": weights,
            "weight_names": res.param_names if res.blackbox else None,
            "model": params.model.model_dump(),
            "features": res.feature_names,
            "scaling": res.scaling,
            "class_weights": state.class_weights,
            "history": state.history,
            "best_round": best.round if best else None,
            "last_weights": state.weights,
            "rounds": state.t,
            "server_rounds": len(state.contributors),
            "clients": max(state.contributors or [0]),
            "stopped": stop_reason,
            "stop_reason": reason,
            "divergence": state.divergence,
            "clip_norms": state.clip_history,
        }
        noise_std: dict[str, float] = {}
        intervals: dict[str, tuple[float, float]] = {}
        for i, (entry, stds) in enumerate(zip(state.history, state.eval_noise)):
            for key, std in stds.items():
                value = entry.get(key)
                if not isinstance(value, (int, float)) or not math.isfinite(value):
                    continue
                top = params.loss_cap if key in ("loss", "eval_loss") else 1.0 if key == "accuracy" else math.inf
                if isinstance(res.model, BlackBoxModel) and key in res.model.metrics:
                    top = res.model.metrics[key].bound
                p = value_path("history", i, key)
                noise_std[p] = std
                intervals[p] = (max(0.0, value - 1.959963984540054 * std), min(top, value + 1.959963984540054 * std))
        warnings: list[ReleaseWarning] = []
        failure = None
        if state.divergence is not None:
            kept = f"the weights of round {best.round} (its last evaluation before)" if best else "the initial weights"
            failure = (f"training diverged at round {state.divergence['round']}: {state.divergence['reason']}; the result "
                       f"keeps {kept} — lower client.lr or server_optimizer.lr, or clip the updates (clip_norm or "
                       "adaptive_clipping)")
            warnings.append(ReleaseWarning(value_path("stop_reason"), failure))
        elif best is not None and best.round == 0 and state.t > 0 and len(state.history) > 1:
            warnings.append(ReleaseWarning(value_path("best_round"), (
                "no evaluation after training was better than the starting model beyond the noise: the weights "
                "released are the starting model's — check client.lr and server_optimizer.lr, or raise privacy.epsilon "
                "or the devices evaluated so the evaluations can tell")))
        if params.weighting == "examples" and state.eval_noise and any(state.eval_noise) and not _uses_votes(params):
            warnings.append(ReleaseWarning(value_path("weights"), _EXAMPLES_UNDER_DP))
        advice = ("raise privacy.epsilon, evaluate over more devices (cohort.min_clients) or less often (eval_every) — "
                  "differences between evaluations smaller than their intervals are noise")
        return Release(result, noise_std=noise_std, intervals=intervals, warnings=warnings, advice=advice, failure=failure)

    def preview(self, params: TrainingParams, rounds: list[RoundPreview]) -> tuple[list[ExpectedValue], list[ReleaseWarning]]:
        """The noise of an evaluation's loss and accuracy (every device holding evaluation rows, the loss near
        its cap's tenth) and the noise each training round adds to every weight (fedavg: server lr × the
        averaged update's noise; at the initial clip norm under adaptive clipping)."""
        values: list[ExpectedValue] = []
        warnings: list[ReleaseWarning] = []
        res = resolve(params)
        u = float(encoding.unit(params.precision_bits))
        for r in rounds:
            phase = r.plan.meta.get("phase")
            n = max(r.contributors, 1)
            sigma_u = r.std / u
            if phase == "eval" and not any(v.path.startswith("/history/") for v in values):
                note = f"per evaluation, assuming all {n} contributors hold evaluation rows (weighting {params.weighting})"
                if params.weighting == "examples":
                    note += f"; with examples weighting the noise grows as devices hold fewer than client.max_examples ({params.client.max_examples}) rows"
                loss_std = params.loss_cap * sigma_u / n * math.sqrt(1 + 0.01)
                if params.holdout_fraction > 0:
                    values.append(ExpectedValue(value_path("history", 0, "eval_loss"), loss_std, note))
                    values.append(ExpectedValue(value_path("history", 0, "loss"), loss_std, note))
                else:  # one loss over every row, from both sums
                    values.append(ExpectedValue(value_path("history", 0, "eval_loss"), loss_std / math.sqrt(2), note))
                classifier = (res.model.correct is not None) if isinstance(res.model, BlackBoxModel) else (res.model.n_classes is not None)
                if classifier:
                    acc_std = sigma_u / n * math.sqrt(1.5)
                    values.append(ExpectedValue(value_path("history", 0, "accuracy"), acc_std, note))
                    if 1.96 * acc_std > 0.05:
                        warnings.append(ReleaseWarning(value_path("history", 0, "accuracy"),
                            f"an evaluation's accuracy will be known to ±{1.96 * acc_std:.3g}: raise privacy.epsilon, "
                            "evaluate over more devices (cohort.min_clients) or less often (eval_every)"))
            if phase == "train" and not _uses_votes(params) and not any(v.path == "/weights/0" for v in values):
                clip = params.clip_norm
                denom = n if params.weighting == "uniform" else n * 1.0  # examples weighting: ≥ n·ω
                std = clip * sigma_u / denom
                lr = params.server_optimizer.lr if isinstance(params.server_optimizer, FedAvgSpec) else None
                if lr is not None:
                    std *= lr
                note = ("noise added to every weight in each training round" + ("" if lr is not None else
                        " before the server optimiser") + (" at the initial clip norm (adaptive clipping moves it)"
                        if params.adaptive_clipping else ""))
                values.append(ExpectedValue(value_path("weights", 0), std, note))
        if params.weighting == "examples" and any(r.std > 0 for r in rounds) and not _uses_votes(params):
            warnings.append(ReleaseWarning(value_path("weights"), _EXAMPLES_UNDER_DP))
        return values, warnings

    def tabulate(self, result: dict[str, Any]) -> list[ResultTable]:
        """The metrics of every evaluation round (lines over the rounds), then the released weights."""
        history = [e for e in result.get("history") or [] if isinstance(e, dict)]
        metrics = [k for k in dict.fromkeys(k for e in history for k in e) if k not in ("round", "clients")]
        rows = tuple({"round": Cell(e.get("round")), **{k: num_cell(e.get(k), "history", i, k) for k in metrics if k in e},
                      "clients": Cell(e.get("clients"))} for i, e in enumerate(history))
        numeric = tuple(k for k in metrics if any(isinstance(e.get(k), (int, float)) for e in history))
        model = result.get("model") or {}
        weights = result.get("weights") or []
        head = (f"model {model.get('name')} · {result.get('rounds')} updates in {result.get('server_rounds')} server "
                f"rounds · stopped: {result.get('stop_reason')} · best evaluated round {result.get('best_round')}")
        history_table = ResultTable(
            "history", "history, one row per evaluation round",
            (Column("round", "round", "key"), *(Column(k, k) for k in metrics), Column("clients", "clients")),
            rows, Chart("line", "round", numeric) if numeric else None, head)
        names = result.get("weight_names") or []
        if len(names) != len(weights):  # a linear model: one weight per feature, then the bias
            raw = result.get("features")
            features: list[Any] = raw if isinstance(raw, list) else []
            names = features if len(features) == len(weights) else [*features, "bias"] if len(features) + 1 == len(weights) else []
        weight_rows = tuple({"index": Cell(i), "name": Cell(names[i] if i < len(names) else None),
                             "weight": num_cell(w, "weights", i)} for i, w in enumerate(weights))
        weights_table = ResultTable("weights", "weights", (Column("index", "index", "key"), Column("name", "name", "text"),
                                                           Column("weight", "weight")), weight_rows)
        return [history_table, weights_table]


_EXAMPLES_UNDER_DP = ("weighting 'examples' under DP: a device's weight is its rows / client.max_examples, so devices "
                      "holding few rows give averages whose weights drown in the noise — use weighting 'uniform' (the "
                      "DP default) or lower client.max_examples to the rows a device holds")


def _next_clip(clip: float, counts: np.ndarray, contributors: int, target: float, lr: float) -> float:
    """Adaptive clipping: the geometric update from the noisy count of unclipped devices (one entry), or the
    warm start's interpolated quantile from the noisy norm histogram (`encoding.NORM_BUCKETS` entries)."""
    n = max(contributors, 1)
    if len(counts) == 1:
        share = min(max(float(counts[0]) / n, 0.0), 1.0)
        new = clip * math.exp(-lr * (share - target))
    else:
        cum = np.cumsum(np.maximum(counts, 0.0))
        if cum[-1] <= 0:
            return clip
        frac = cum / cum[-1]
        edges = encoding.norm_grid(clip)
        k = int(np.searchsorted(frac, target))
        if k >= len(edges):
            new = edges[-1] * 2
        elif k == 0:
            new = edges[0]
        else:
            lo, hi = frac[k - 1], frac[k]
            pos = 0.0 if hi <= lo else (target - lo) / (hi - lo)
            new = edges[k - 1] * 2.0 ** pos
    return float(min(max(new, 1e-12), MAX_CLIP_NORM))


def _divergence(
    raw: dict[str, tuple[float, float, float]], stds: dict[str, float], history: list[dict[str, Any]],
    earlier: list[dict[str, float]],
) -> str | None:
    """Why an evaluation shows divergence, or None. The loss test compares the new loss with every earlier
    evaluation s on its own: it has exploded when, less `NOISE_Z` stds of the difference (both noises), it still
    exceeds ℓ_s by (`DIVERGENCE_FACTOR` − 1) × what ℓ_s surely is (ℓ_s less `SELECTION_Z` of its stds) and by 5 %
    of the cap. The noise enters once, through the difference, so the test keeps its power when the noise is large
    (the former test, 3 × (lowest loss + 4 stds), could not fire once the std passed cap/16), and an honest run
    falsely fires only on a 4-std deviation of one difference."""
    for key, (value, std, top) in raw.items():
        if not math.isfinite(value):
            return f"the {key} is not finite"
    if "accuracy" in raw:
        acc, std, _ = raw["accuracy"]
        if acc < -NOISE_Z * std - 1e-9 or acc > 1 + NOISE_Z * std + 1e-9:
            return f"the accuracy {acc:.4g} lies outside [0, 1] by more than its noise (std {std:.3g})"
    loss, std, cap = raw["eval_loss"]
    for entry, noise in zip(history, earlier):
        before = entry.get("eval_loss")
        if before is None:
            continue
        before_std = noise.get("eval_loss", 0.0)
        low = max(before - SELECTION_Z * before_std, 0.0)  # the factor applies to what ℓ_s surely is, not to its noise
        if loss - NOISE_Z * math.hypot(std, before_std) > before + max((DIVERGENCE_FACTOR - 1) * low, 0.05 * cap):
            return (f"the evaluation loss exploded to {loss:.4g} from {before:.4g} at round {entry['round']} (more than "
                    f"{DIVERGENCE_FACTOR:g}× and beyond both evaluations' noise)")
    return None
