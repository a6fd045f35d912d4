"""Typed errors of the differential-privacy library; every message names the field or setting to change."""

from __future__ import annotations


class PrivacyError(ValueError):
    """A privacy spec, calibration or release that cannot be honoured; the message names the field."""


class BudgetExceeded(PrivacyError):
    """A query whose cost would exceed its source's privacy budget; the message states what remains."""

    def __init__(self, message: str, remaining_epsilon: float, remaining_delta: float) -> None:
        super().__init__(message)
        self.remaining_epsilon = remaining_epsilon
        self.remaining_delta = remaining_delta


class InsufficientContributors(PrivacyError):
    """Fewer contributors than the t_min the noise was calibrated for: nothing may be released."""
