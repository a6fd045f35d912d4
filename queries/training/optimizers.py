"""Server optimisers and safeguards: one round's aggregate → new weights (pure functions on arrays).

Conventions: `delta` is the averaged device update, a *descent* direction (θ_local − θ_global after local
training; for sign votes, the vote sum). Optimiser state is a dict of float lists (JSON).

- fedavg: θ ← θ + lr·Δ̄ (McMahan et al.; E=1, B=all is FedSGD).
- adam (FedAdam, Reddi et al. 2021): m ← β1·m + (1−β1)Δ̄; v ← β2·v + (1−β2)Δ̄²; θ ← θ + lr·m/(√v + τ)
  (optional bias correction).
- rprop (Hartmann, "Federated Learning", MSc thesis, FU Berlin 2018, §3.5; Riedmiller & Braun):
  s = sign(Δ̄) (or of the vote sum); per weight the step grows by `increase` when s agrees with the
  previous round's sign, shrinks by `decrease` when it flips, stays when either is 0; clipped to
  [step_min, step_max]; θ ← θ + step·s.

Safeguards (Hartmann et al., "Federated Learning for Ranking Browser History Suggestions", 2019, §5.6),
given old weights that satisfy them. Every weight gets bounds [lo, hi]: the change cap (old ± max_change)
intersected with [0, ∞) for non-negative weights; old lies inside. Inside an ordered group (w_1 ≥ w_2 ≥ …)
the bounds are tightened to monotone ones (hi_k ← min_{j≤k} hi_j, lo_k ← max_{j≥k} lo_j, still containing
old), the proposal is clipped to them and then trimmed front to back with w_k ← min(w_k, w_{k−1}), which
cannot leave [lo_k, hi_k] because lo is non-increasing. So all safeguards hold together after every round
— "trimming the update magnitude" of the thesis (§7.2) made exact. Groups must not share weights.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from queries.training.params import AdamSpec, FedAvgSpec, RPropSpec


def initial_optimizer_state(spec: FedAvgSpec | AdamSpec | RPropSpec, n: int, steps: np.ndarray | None) -> dict[str, Any]:
    if isinstance(spec, AdamSpec):
        return {"m": [0.0] * n, "v": [0.0] * n, "t": 0}
    if isinstance(spec, RPropSpec):
        assert steps is not None
        return {"step": steps.tolist(), "prev_sign": [0.0] * n}
    return {}


def fedavg_step(theta: np.ndarray, delta: np.ndarray, spec: FedAvgSpec) -> np.ndarray:
    return theta + spec.lr * delta


def adam_step(theta: np.ndarray, delta: np.ndarray, spec: AdamSpec, state: dict[str, Any]) -> tuple[np.ndarray, dict[str, Any]]:
    m = spec.beta1 * np.asarray(state["m"]) + (1 - spec.beta1) * delta
    v = spec.beta2 * np.asarray(state["v"]) + (1 - spec.beta2) * delta * delta
    t = int(state["t"]) + 1
    m_hat, v_hat = m, v
    if spec.bias_correction:
        m_hat = m / (1 - spec.beta1**t)
        v_hat = v / (1 - spec.beta2**t)
    new = theta + spec.lr * m_hat / (np.sqrt(v_hat) + spec.tau)
    return new, {"m": m.tolist(), "v": v.tolist(), "t": t}


def rprop_step(
    theta: np.ndarray, direction: np.ndarray, spec: RPropSpec, state: dict[str, Any], step_max: np.ndarray | float
) -> tuple[np.ndarray, dict[str, Any]]:
    """`direction`: the aggregate whose sign is the descent direction (vote sum or averaged update);
    `step_max`: the resolved per-weight maximum step."""
    sign = np.sign(direction)
    prev = np.asarray(state["prev_sign"], dtype=np.float64)
    step = np.asarray(state["step"], dtype=np.float64)
    agree = sign * prev
    step = np.where(agree > 0, np.minimum(step * spec.increase, step_max), step)
    step = np.where(agree < 0, np.maximum(step * spec.decrease, spec.step_min), step)
    return theta + step * sign, {"step": step.tolist(), "prev_sign": sign.tolist()}


def apply_safeguards(
    old: np.ndarray,
    new: np.ndarray,
    max_change: np.ndarray | None,
    nonnegative: np.ndarray,
    groups: list[np.ndarray],
) -> np.ndarray:
    old = np.asarray(old, dtype=np.float64)
    lo = np.full(old.shape, -np.inf) if max_change is None else old - max_change
    hi = np.full(old.shape, np.inf) if max_change is None else old + max_change
    if len(nonnegative):
        lo[nonnegative] = np.maximum(lo[nonnegative], 0.0)
    for idx in groups:
        hi[idx] = np.minimum.accumulate(hi[idx])
        lo[idx] = np.maximum.accumulate(lo[idx][::-1])[::-1]
    out = np.clip(np.asarray(new, dtype=np.float64), lo, hi)
    for idx in groups:
        for a, b in zip(idx[:-1], idx[1:]):
            out[b] = min(out[b], out[a])
    return out
