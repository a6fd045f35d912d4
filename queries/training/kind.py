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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from queries.kind import AggregateNoise, QueryKind, QueryKindError, Release, RoundPlan
from queries.training import client, encoding
from queries.training.blackbox import BlackBoxModel
from queries.training.optimizers import adam_step, apply_safeguards, fedavg_step, initial_optimizer_state, rprop_step
from queries.training.params import AdamSpec, FedAvgSpec, Resolved, RPropSpec, TrainingParams, resolve
from secagg.validity.statement import Signs, Statement

Phase = Literal["label_counts", "eval", "train", "done"]


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
    """One entry per evaluation: round, loss, eval_loss, clients, accuracy?, metrics…"""
    best: BestEval | None = None
    bad_evals: int = 0
    stop_reason: str | None = None
    """The kind's own reason to stop (early_stopping)."""
    contributors: list[int] = field(default_factory=list)


def _metric_names(res: Resolved) -> list[str]:
    return list(res.model.metrics) if isinstance(res.model, BlackBoxModel) else []


def _uses_votes(params: TrainingParams) -> bool:
    opt = params.server_optimizer
    return isinstance(opt, RPropSpec) and opt.votes == "sign"


class TrainingKind(QueryKind[TrainingParams, TrainingState]):
    name = "training"
    Params = TrainingParams
    State = TrainingState

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
        task: dict[str, Any] = {
            "phase": phase,
            "model": params.model.model_dump(),
            "client": params.client.model_dump(),
            "precision_bits": params.precision_bits,
            "holdout_fraction": params.holdout_fraction,
            "features": params.features,
            "scaling": res.scaling,
            "class_weights": state.class_weights,
        }
        if phase == "label_counts":
            k = int(getattr(res.model, "n_classes"))
            task["n_classes"] = k
            b = encoding.label_bounds(k, params.precision_bits)
        elif phase == "train":
            votes = _uses_votes(params)
            weighted = params.weighting == "examples"
            task |= {
                "weights": state.weights,
                "clip_norm": params.clip_norm,
                "votes": "sign" if votes else "update",
                "weighting": params.weighting,
                "weight_share": params.weight_share,
            }
            b = encoding.train_bounds(res.n_params, votes, weighted and not votes, params.precision_bits, params.weight_share)
        elif phase == "eval":
            names = _metric_names(res)
            task |= {"weights": state.weights, "loss_cap": params.loss_cap, "metrics": names}
            b = encoding.eval_bounds(len(names), params.precision_bits)
        else:
            raise ValueError(f"state.phase: unknown phase {phase!r}")
        return RoundPlan(
            round=round_index,
            task=task,
            dim=b.dim,
            max_abs=b.max_abs,
            l1_sensitivity=b.l1,
            l2_sensitivity=b.l2,
            sample_rate=params.sample_rate,
            min_clients=params.clients_per_round,
            meta={"phase": phase, "t": state.t},
        )

    def contribute(self, task: dict[str, Any], rows: list[Any], rng: np.random.Generator) -> np.ndarray:
        return client.contribute(task, rows, rng)

    def validity(self, task: dict[str, Any]) -> Statement | None:
        """Sign-vote training rounds: every entry in {−1, 0, +1}. Clipped updates, evaluations and label counts
        carry no proof (out of scope: the server's plausibility check still bounds their aggregate)."""
        if task.get("phase") != "train" or task.get("votes") != "sign":
            return None
        try:
            d = len(task["weights"])
        except (KeyError, TypeError) as exc:
            raise QueryKindError(f"task: malformed training task ({exc!r})") from None
        return Statement((Signs(d),))

    def task_sensitivity(self, task: dict[str, Any]) -> tuple[float, float]:
        """The phase's `encoding` bounds, from the task: the same functions `plan_round` sizes the round with."""
        try:
            phase, pb = task["phase"], task["precision_bits"]
            if isinstance(pb, bool) or not isinstance(pb, int):
                raise TypeError(f"precision_bits must be an integer, got {pb!r}")
            if phase == "label_counts":
                b = encoding.label_bounds(int(task["n_classes"]), pb)
            elif phase == "train":
                votes = task["votes"] == "sign"
                weighted = task["weighting"] == "examples" and not votes
                b = encoding.train_bounds(len(task["weights"]), votes, weighted, pb, float(task["weight_share"]))
            elif phase == "eval":
                b = encoding.eval_bounds(len(task["metrics"]), pb)
            else:
                raise ValueError(f"unknown phase {phase!r}")
        except (KeyError, TypeError, ValueError) as exc:
            raise QueryKindError(f"task: malformed training task ({exc})") from None
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
            labels = encoding.label_layout(int(getattr(res.model, "n_classes")))
            shares = np.maximum(labels.view(agg / u, "aggregate")["shares"], 1e-9)
            k = len(shares)
            weights = shares.sum() / (k * shares)
            return replace(
                new,
                label_shares=(shares / shares.sum()).tolist(),
                class_weights=(weights / weights.mean()).tolist(),
                phase=self._next_phase(params, 0, False),
            )
        if phase == "train":
            return self._apply_update(params, res, new, agg, contributors, cap, u)
        return self._record_eval(params, res, new, agg, contributors, cap, u)

    def _apply_update(self, params: TrainingParams, res: Resolved, state: TrainingState, agg: np.ndarray, contributors: int, cap: int, u: float) -> TrainingState:
        d = res.n_params
        theta = np.asarray(state.weights, dtype=np.float64)
        opt = params.server_optimizer
        if _uses_votes(params):
            direction = encoding.vote_layout(d).view(agg, "aggregate")["votes"]
        else:
            weighted = params.weighting == "examples"
            parts = encoding.update_layout(d, weighted).view(agg, "aggregate")
            total = parts["update"] * params.clip_norm / u
            if weighted:
                wsum = float(parts["weight"]) / encoding.weight_unit(params.precision_bits, params.weight_share)
                denom = max(wsum, 1.0 / cap)  # noisy weight: clamp at one example's worth
            else:
                denom = float(contributors)
            direction = total / denom
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
        return replace(state, weights=theta_new.tolist(), opt=opt_state, t=t, phase=self._next_phase(params, t, False))

    def _record_eval(self, params: TrainingParams, res: Resolved, state: TrainingState, agg: np.ndarray, contributors: int, cap: int, u: float) -> TrainingState:
        names = _metric_names(res)
        vals = encoding.eval_layout(len(names)).view(agg / u, "aggregate")
        wt, we = max(float(vals["train_weight"]), 1.0 / cap), max(float(vals["eval_weight"]), 1.0 / cap)
        entry: dict[str, Any] = {
            "round": state.t,
            "loss": float(vals["train_loss"] / wt * params.loss_cap),
            "eval_loss": float(vals["eval_loss"] / we * params.loss_cap),
            "clients": contributors,
        }
        has_acc = isinstance(res.model, BlackBoxModel) and res.model.correct is not None
        has_acc = has_acc or (not isinstance(res.model, BlackBoxModel) and res.model.n_classes is not None)
        if has_acc:
            entry["accuracy"] = float(vals["accuracy"] / we)
        if isinstance(res.model, BlackBoxModel):
            for name, value in zip(names, vals["metrics"]):
                entry[name] = float(value / we * res.model.metrics[name].bound)
        history = state.history + [entry]
        best, bad_evals = state.best, state.bad_evals
        if best is None or entry["eval_loss"] < best.eval_loss - params.min_delta:
            best, bad_evals = BestEval(entry["round"], entry["eval_loss"], state.weights), 0
        else:
            bad_evals += 1
        if params.patience is not None and bad_evals >= params.patience:
            return replace(state, history=history, best=best, bad_evals=bad_evals, phase="done", stop_reason="early_stopping")
        phase = self._next_phase(params, state.t, True)
        return replace(state, history=history, best=best, bad_evals=bad_evals, phase=phase)

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
            "features": params.features,
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
        }
        return Release(result)
