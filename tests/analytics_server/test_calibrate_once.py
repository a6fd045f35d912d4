"""The submit-time check calibrates a spec's noise exactly once, after settling its validation default: a
spec whose proofs would cost too much by default gets "none" and a calibration for its whole δ, a cheap one
keeps proofs and a calibration for δ less the truncation share — each the same as `dp.calibrate_query` gives
directly for that δ — and what is stored is the calibration's JSON (`to_dict`)."""

from __future__ import annotations

from typing import Any

import pytest

from analytics_server import noise_plan, privacy, spec_check, validation
from analytics_server.delta_split import TRUNCATION_DELTA_SHARE
from analytics_server.settings import Settings
from queries import dp
from queries.registry import get_kind
from queries.spec import QuerySpec

EXPENSIVE = {"kind": "heavy_hitters", "source": "words",
             "params": {"mode": "secagg", "max_length": 4, "max_frontier": 32},
             "privacy": {"mechanism": "skellam", "epsilon": 4.0, "delta": 1e-6},
             "cohort": {"min_clients": 400, "max_clients": 500}}
"""A full heavy-hitters frontier with noise: proofs would take more than a quarter of a phase to verify
(the same spec as tests/analytics_server/test_validation.py's default test)."""
CHEAP = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun", "star"]},
         "privacy": {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6},
         "cohort": {"min_clients": 3, "max_clients": 50, "phase_timeout_s": 5}}


class Spy:
    """Counts the calls of a wrapped function."""

    def __init__(self, real: Any) -> None:
        self.real, self.calls = real, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.real(*args, **kwargs)


@pytest.fixture
def spies(monkeypatch: pytest.MonkeyPatch) -> tuple[Spy, Spy]:
    """(privacy.check_and_calibrate, dp.calibrate_query) wrapped, so a second calibration anywhere shows."""
    checks, fits = Spy(privacy.check_and_calibrate), Spy(dp.calibrate_query)
    monkeypatch.setattr(privacy, "check_and_calibrate", checks)
    monkeypatch.setattr(dp, "calibrate_query", fits)
    return checks, fits


def test_settled_to_none_calibrates_once_for_the_whole_delta(spies: tuple[Spy, Spy]) -> None:
    checks, fits = spies
    checked = spec_check.check_spec(EXPENSIVE, Settings())
    assert checked.spec.privacy.validation == "none"  # settle_default's "no proofs" branch
    assert (checks.calls, fits.calls) == (1, 1)
    fits.calls = 0
    expected = fits.real("skellam", 4.0, 1e-6, rounds=checked.rounds_upper_bound, t_min=400)
    assert checked.calibration == expected
    assert isinstance(checked.calibration, dp.QueryCalibration)


def test_the_cheap_default_settles_the_same_as_with_the_real_calibration(spies: tuple[Spy, Spy]) -> None:
    """The decision uses an estimate of the noise (the Gaussian floor): for the expensive spec the proofs' cost at
    the calibrated noise (what the check used to compute) is over the limit too."""
    checks, _ = spies
    kind = get_kind("heavy_hitters")
    settings = Settings()
    spec = QuerySpec.model_validate(EXPENSIVE)
    spec = spec.model_copy(update={"params": kind.bind_privacy(spec.params, spec.privacy)})
    params = kind.parse_params(spec.params)
    plans = noise_plan.preview_rounds(kind, params, kind.initial_state(params), 400)
    spec = validation.resolve(spec, kind, plans, False)
    assert spec.privacy.validation == "proofs"
    real = checks.real(spec, kind, params, "demo")
    limit = validation.DEFAULT_PHASE_SHARE * spec.cohort.phase_timeout_s
    assert validation.proof_cost(spec, kind, params, plans, real) * validation.VERIFY_S_PER_BRANCH > limit
    estimate = privacy.estimated_calibration(spec, kind, params)
    assert estimate is not None and real is not None and estimate.noise_multiplier <= real.noise_multiplier
    settled = validation.settle_default(spec, kind, params, plans, None, settings.validation_required())
    assert settled.privacy.validation == "none"


def test_kept_proofs_calibrate_once_for_delta_less_truncation(spies: tuple[Spy, Spy]) -> None:
    checks, fits = spies
    checked = spec_check.check_spec(CHEAP, Settings())
    assert checked.spec.privacy.validation == "proofs"
    assert (checks.calls, fits.calls) == (1, 1)
    fits.calls = 0
    expected = fits.real("skellam", 1.0, 1e-6 * (1 - TRUNCATION_DELTA_SHARE), rounds=checked.rounds_upper_bound, t_min=3)
    assert checked.calibration == expected


def test_stored_calibration_round_trips() -> None:
    checked = spec_check.check_spec(CHEAP, Settings())
    assert checked.calibration is not None
    stored = checked.calibration.to_dict()
    assert privacy.stored_calibration(stored) == checked.calibration
    assert privacy.stored_calibration(None) is None
    with pytest.raises(dp.PrivacyError, match="calibration.t_min"):
        privacy.stored_calibration({k: v for k, v in stored.items() if k != "t_min"})
