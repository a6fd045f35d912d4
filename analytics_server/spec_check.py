"""Checking a submitted query spec: parse, privacy policy and calibration, the noise plan of its rounds and
its initial state — in a worker thread with a time limit, never on the event loop.

Every size in a spec is bounded (`queries.spec`, each kind's limits), so a check is short; the thread and
the limit (`FA_SPEC_CHECK_TIMEOUT_S`) keep the server answering even if one is not. A check that started
but did not finish in time is refused as `Invalid` (422: the spec is too expensive to check); one that could not
start because both checker threads are busy as `Unavailable` (503 with `Retry-After`). Every refusal is a typed
error of `fa_common.errors`; the HTTP edge answers it. Python cannot stop a running
thread, so a check that overran still finishes in its thread; with at most `CHECK_THREADS` such threads the
rest of the server (its own thread pool, the event loop) is unaffected.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from analytics_server import noise_plan, preview, privacy, validation
from analytics_server.settings import Settings
from fa_common.errors import Invalid, Unavailable
from queries import dp
from queries.field_hints import validation_message
from queries.kind import QueryKind, QueryKindError
from queries.registry import get_kind
from queries.spec import QuerySpec

CHECK_THREADS = 2
"""Threads that check specs (separate from the protocol thread pool, so a slow check never delays a cohort)."""

_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=CHECK_THREADS, thread_name_prefix="fa-spec-check")
        return _executor


@dataclass(frozen=True)
class CheckedSpec:
    """Everything the submit handler stores for an accepted spec."""

    spec: QuerySpec
    kind: QueryKind[Any, Any]
    params: BaseModel
    calibration: dp.QueryCalibration | None
    """Stored as `to_dict()` (the query row's calibration column)."""
    state: dict[str, Any]
    rounds_upper_bound: int
    cost: dp.PrivacyCost | None
    preview: preview.Preview | None = None
    """The expected noise of what the query would release (only when asked for: `POST /v1/queries/preview`)."""


def check_spec(raw: Any, settings: Settings, with_preview: bool = False) -> CheckedSpec:
    """The whole submit-time check (blocking); raises Invalid naming the field. `with_preview`: also the
    expected noise of every value the query would release."""
    try:
        spec = QuerySpec.model_validate(raw)
    except ValidationError as exc:
        raise Invalid(*validation_message(exc, "", QuerySpec)) from None
    try:
        kind = get_kind(spec.kind)
    except QueryKindError as exc:
        raise Invalid(str(exc), [{"field": "kind", "message": str(exc)}]) from None
    try:
        spec = spec.model_copy(update={"params": kind.bind_privacy(spec.params, spec.privacy)})
        params = kind.parse_params(spec.params)
    except ValidationError as exc:
        raise Invalid(*validation_message(exc, "params", getattr(kind, "Params", None))) from None
    except (QueryKindError, ValueError, TypeError) as exc:
        raise Invalid(f"params: {exc}") from None
    try:
        plans = noise_plan.preview_rounds(kind, params, kind.initial_state(params), spec.cohort.min_clients)
    except noise_plan.NoisePlanError:
        plans = []  # reported by the noise plan check below
    try:
        spec = validation.resolve(spec, kind, plans, settings.validation_required())
    except validation.ValidationError as exc:
        raise Invalid(str(exc), [{"field": "privacy.validation", "message": str(exc)}]) from None
    try:
        calibration = privacy.check_and_calibrate(spec, kind, params, settings.profile, settings.privacy_policy())
    except privacy.PrivacyPolicyError as exc:
        raise Invalid(str(exc)) from None
    state = kind.initial_state(params)
    try:
        noise_plan.check_rounds(spec, kind, params, calibration, state)
    except noise_plan.NoisePlanError as exc:
        field = str(exc).split(":", 1)[0]
        raise Invalid(str(exc), [{"field": field, "message": str(exc)}]) from None
    return CheckedSpec(
        spec=spec,
        kind=kind,
        params=params,
        calibration=calibration,
        state=kind.state_to_json(state),
        rounds_upper_bound=kind.rounds_upper_bound(params),
        cost=privacy.query_cost(spec, kind, params),
        preview=preview.build(spec, kind, params, calibration) if with_preview else None,
    )


async def check_spec_off_loop(raw: Any, settings: Settings, with_preview: bool = False) -> CheckedSpec:
    """`check_spec` in a checker thread, within `settings.spec_check_timeout_s` (Invalid / Unavailable when over)."""
    started = threading.Event()

    def job() -> CheckedSpec:
        started.set()
        return check_spec(raw, settings, with_preview=True) if with_preview else check_spec(raw, settings)

    limit = settings.spec_check_timeout_s
    future = asyncio.get_running_loop().run_in_executor(_pool(), job)
    try:
        return await asyncio.wait_for(future, limit)
    except asyncio.TimeoutError:
        if started.is_set():
            raise Invalid(
                f"params: checking this spec (parsing, privacy calibration, noise plan) took longer than the server's "
                f"limit of {limit:g} s (FA_SPEC_CHECK_TIMEOUT_S); submit a smaller spec (fewer rounds, buckets or "
                "features, a smaller model)",
            ) from None
        raise Unavailable("the server is busy checking other query specs; retry later", retry_after_s=limit) from None
