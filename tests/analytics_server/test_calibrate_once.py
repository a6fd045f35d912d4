"""The submit-time check calibrates a spec's noise exactly once, after settling its validation mode: proofs (the
default for every kind in every profile) get a calibration for δ less the truncation share, "none" (asked, where
the profile allows it) one for the whole δ — each the same as `dp.calibrate_query` gives directly for that δ — and
what is stored is the calibration's JSON (`to_dict`)."""

from __future__ import annotations

from typing import Any

import pytest

from analytics_server import privacy, spec_check
from analytics_server.delta_split import TRUNCATION_DELTA_SHARE
from analytics_server.settings import Settings
from queries import dp

EXPENSIVE = {"kind": "heavy_hitters", "source": "words",
             "params": {"mode": "secagg", "max_length": 4, "max_frontier": 32},
             "privacy": {"mechanism": "skellam", "epsilon": 4.0, "delta": 1e-6},
             "cohort": {"min_clients": 400, "max_clients": 500}}
"""A full heavy-hitters frontier with noise (the spec that defaulted to "none" by cost before the bit-vector proofs)."""
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


def test_a_costly_spec_keeps_proofs_by_default_in_the_demo_profile(spies: tuple[Spy, Spy]) -> None:
    """A full noisy heavy-hitters frontier used to default to "none" in the demo profile (its OR proofs cost too
    much to verify); proofs are the default for every kind in every profile now, calibrated once for δ less the
    truncation share."""
    checks, fits = spies
    checked = spec_check.check_spec(EXPENSIVE, Settings())
    assert checked.spec.privacy.validation == "proofs"
    assert (checks.calls, fits.calls) == (1, 1)
    fits.calls = 0
    expected = fits.real("skellam", 4.0, 1e-6 * (1 - TRUNCATION_DELTA_SHARE), rounds=checked.rounds_upper_bound, t_min=400)
    assert checked.calibration == expected


def test_none_where_the_profile_allows_it_calibrates_for_the_whole_delta(spies: tuple[Spy, Spy]) -> None:
    _, fits = spies
    asked = {**EXPENSIVE, "privacy": {**EXPENSIVE["privacy"], "validation": "none"}}
    checked = spec_check.check_spec(asked, Settings())
    assert checked.spec.privacy.validation == "none"
    assert checked.calibration == fits.real("skellam", 4.0, 1e-6, rounds=checked.rounds_upper_bound, t_min=400)


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
