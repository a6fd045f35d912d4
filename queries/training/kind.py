"""The `training` query kind: federated training rounds, federated evaluation, early stopping.

Round sequence (all state in the JSON `state`, weights stored after every round, so a restarted server
resumes from the last decoded round):
  [label_counts]  when class_weighting: one round summing per-class example shares → class weights;
  eval            before training (baseline), every `eval_every` training rounds and after the last;
  train × rounds  devices train locally, send one clipped+quantised update (or sign votes); the server
                  averages, applies its optimiser, then the safeguards.
Early stopping: after `patience` evaluations whose eval loss did not beat the best by `min_delta`, the
query finishes and keeps the best evaluated weights. `finalize` works from any state; if the server set
`state["stopped"]` (e.g. the privacy budget), the result says so and keeps the best evaluated weights.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from queries.kind import QueryKind, RoundPlan
from queries.training import client, encoding
from queries.training.blackbox import BlackBoxModel
from queries.training.optimizers import adam_step, apply_safeguards, fedavg_step, initial_optimizer_state, rprop_step
from queries.training.params import AdamSpec, FedAvgSpec, Resolved, RPropSpec, TrainingParams, resolve


def _metric_names(res: Resolved) -> list[str]:
    return list(res.model.metrics) if isinstance(res.model, BlackBoxModel) else []


def _uses_votes(params: TrainingParams) -> bool:
    opt = params.server_optimizer
    return isinstance(opt, RPropSpec) and opt.votes == "sign"


class TrainingKind(QueryKind):
    name = "training"
    Params = TrainingParams

    # ------------------------------------------------------------------ schedule
    def n_evals(self, params: TrainingParams) -> int:
        return 0 if params.eval_every == 0 else 1 + math.ceil(params.rounds / params.eval_every)

    def rounds_upper_bound(self, params: TrainingParams) -> int:  # type: ignore[override]
        return int(params.class_weighting) + params.rounds + self.n_evals(params)

    def _eval_due(self, params: TrainingParams, t: int) -> bool:
        return params.eval_every > 0 and (t % params.eval_every == 0 or t == params.rounds)

    def _next_phase(self, params: TrainingParams, t: int, just_evaluated: bool) -> str:
        if not just_evaluated and self._eval_due(params, t):
            return "eval"
        return "done" if t >= params.rounds else "train"

    def initial_state(self, params: TrainingParams) -> dict[str, Any]:  # type: ignore[override]
        res = resolve(params)
        first = "label_counts" if params.class_weighting else self._next_phase(params, 0, False)
        return {
            "phase": first,
            "t": 0,
            "weights": res.initial.tolist(),
            "opt": initial_optimizer_state(params.server_optimizer, res.n_params, res.rprop_initial_step),
            "class_weights": None,
            "history": [],
            "best": None,
            "bad_evals": 0,
            "stop_reason": None,
            "contributors": [],
        }

    # ------------------------------------------------------------------ planning
    def plan_round(self, params: TrainingParams, state: dict[str, Any], round_index: int) -> RoundPlan | None:  # type: ignore[override]
        phase = state["phase"]
        if phase == "done" or state.get("stopped"):
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
            "class_weights": state["class_weights"],
        }
        if phase == "label_counts":
            k = int(getattr(res.model, "n_classes"))
            task["n_classes"] = k
            b = encoding.label_bounds(k, params.precision_bits)
        elif phase == "train":
            votes = _uses_votes(params)
            weighted = params.weighting == "examples"
            task |= {
                "weights": state["weights"],
                "clip_norm": params.clip_norm,
                "votes": "sign" if votes else "update",
                "weighting": params.weighting,
                "weight_share": params.weight_share,
            }
            b = encoding.train_bounds(res.n_params, votes, weighted and not votes, params.precision_bits, params.weight_share)
        elif phase == "eval":
            names = _metric_names(res)
            task |= {"weights": state["weights"], "loss_cap": params.loss_cap, "metrics": names}
            b = encoding.eval_bounds(5 + len(names), params.precision_bits)
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
            meta={"phase": phase, "t": state["t"]},
        )

    def contribute(self, task: dict[str, Any], rows: list[Any]) -> np.ndarray:
        return client.contribute(task, rows)

    # ------------------------------------------------------------------ decoding
    def decode_round(self, params: TrainingParams, state: dict[str, Any], plan: RoundPlan, aggregate: np.ndarray, contributors: int) -> dict[str, Any]:  # type: ignore[override]
        phase = plan.meta.get("phase", state["phase"])
        if phase != state["phase"] or contributors <= 0:
            return state  # a stale or empty round changes nothing
        agg = np.asarray(aggregate, dtype=np.float64)
        res = resolve(params)
        new = {**state, "contributors": state["contributors"] + [contributors]}
        cap = params.client.max_examples
        u = float(encoding.unit(params.precision_bits))
        if phase == "label_counts":
            shares = np.maximum(agg / u, 1e-9)
            k = len(shares)
            weights = shares.sum() / (k * shares)
            new["label_shares"] = (shares / shares.sum()).tolist()
            new["class_weights"] = (weights / weights.mean()).tolist()
            new["phase"] = self._next_phase(params, 0, False)
            return new
        if phase == "train":
            return self._apply_update(params, res, new, agg, contributors, cap, u)
        return self._record_eval(params, res, new, agg, contributors, cap, u)

    def _apply_update(self, params: TrainingParams, res: Resolved, state: dict[str, Any], agg: np.ndarray, contributors: int, cap: int, u: float) -> dict[str, Any]:
        d = res.n_params
        theta = np.asarray(state["weights"], dtype=np.float64)
        opt = params.server_optimizer
        if _uses_votes(params):
            direction = agg[:d]
        else:
            total = agg[:d] * params.clip_norm / u
            if params.weighting == "examples":
                wsum = agg[d] / encoding.weight_unit(params.precision_bits, params.weight_share)
                denom = max(wsum, 1.0 / cap)  # noisy weight: clamp at one example's worth
            else:
                denom = float(contributors)
            direction = total / denom
        opt_state = state["opt"]
        if isinstance(opt, FedAvgSpec):
            proposal = fedavg_step(theta, direction, opt)
        elif isinstance(opt, AdamSpec):
            proposal, opt_state = adam_step(theta, direction, opt, opt_state)
        else:
            assert res.rprop_step_max is not None
            proposal, opt_state = rprop_step(theta, direction, opt, opt_state, res.rprop_step_max)
        theta_new = apply_safeguards(theta, proposal, res.max_change, res.nonnegative, res.groups)
        t = int(state["t"]) + 1
        return {**state, "weights": theta_new.tolist(), "opt": opt_state, "t": t, "phase": self._next_phase(params, t, False)}

    def _record_eval(self, params: TrainingParams, res: Resolved, state: dict[str, Any], agg: np.ndarray, contributors: int, cap: int, u: float) -> dict[str, Any]:
        vals = agg / u
        names = _metric_names(res)
        wt, we = max(vals[-2], 1.0 / cap), max(vals[-1], 1.0 / cap)
        entry: dict[str, Any] = {
            "round": int(state["t"]),
            "loss": float(vals[0] / wt * params.loss_cap),
            "eval_loss": float(vals[1] / we * params.loss_cap),
            "clients": contributors,
        }
        has_acc = isinstance(res.model, BlackBoxModel) and res.model.correct is not None
        has_acc = has_acc or (not isinstance(res.model, BlackBoxModel) and res.model.n_classes is not None)
        if has_acc:
            entry["accuracy"] = float(vals[2] / we)
        for i, name in enumerate(names):
            metric = res.model.metrics[name]  # type: ignore[union-attr]
            entry[name] = float(vals[3 + i] / we * metric.bound)
        new = {**state, "history": state["history"] + [entry]}
        best = state["best"]
        if best is None or entry["eval_loss"] < best["eval_loss"] - params.min_delta:
            new["best"] = {"round": entry["round"], "eval_loss": entry["eval_loss"], "weights": state["weights"]}
            new["bad_evals"] = 0
        else:
            new["bad_evals"] = int(state["bad_evals"]) + 1
        if params.patience is not None and new["bad_evals"] >= params.patience:
            new["phase"], new["stop_reason"] = "done", "early_stopping"
        else:
            new["phase"] = self._next_phase(params, int(state["t"]), True)
        return new

    # ------------------------------------------------------------------ result
    def finalize(self, params: TrainingParams, state: dict[str, Any]) -> dict[str, Any]:  # type: ignore[override]
        res = resolve(params)
        best = state.get("best")
        weights = best["weights"] if best else state.get("weights", res.initial.tolist())
        stopped = state.get("stopped")
        reason = stopped or state.get("stop_reason") or ("completed" if state.get("phase") == "done" else "interrupted")
        return {
            "weights": weights,
            "weight_names": res.param_names if res.blackbox else None,
            "model": params.model.model_dump(),
            "features": params.features,
            "scaling": res.scaling,
            "class_weights": state.get("class_weights"),
            "history": state.get("history", []),
            "best_round": best["round"] if best else None,
            "last_weights": state.get("weights"),
            "rounds": int(state.get("t", 0)),
            "server_rounds": len(state.get("contributors", [])),
            "clients": max(state.get("contributors") or [0]),
            "stopped": stopped,
            "stop_reason": reason,
        }
