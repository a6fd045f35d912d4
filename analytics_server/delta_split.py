"""How a query's δ is split: the one owner of that rule, imported by `privacy` (calibration, the released δ) and
`validation` (the truncation bound B) alike, so neither needs the other for it.

With validity proofs and noise, devices truncate their noise at a tail bound B (docs/validation.md); that
truncation costs a share `TRUNCATION_DELTA_SHARE` of the spec's δ, and the noise is calibrated for the rest.
Without proofs (or without noise) the whole δ goes to the mechanism.
"""

from __future__ import annotations

from dataclasses import dataclass

from queries.spec import QuerySpec

TRUNCATION_DELTA_SHARE = 0.01
"""Share of a query's δ spent on truncating the devices' noise at the tail bound B (proofs with noise)."""


def uses_proofs(spec: QuerySpec) -> bool:
    """Whether the spec's contributions carry validity proofs (`privacy.validation: "proofs"`)."""
    return getattr(spec.privacy, "validation", None) == "proofs"


@dataclass(frozen=True)
class DeltaSplit:
    """A query's δ and its two parts: `calibration` (what the noise is calibrated for) and `truncation` (what
    truncating the noise at B costs; 0 without proofs or without noise)."""

    total: float
    calibration: float

    @property
    def truncation(self) -> float:
        return self.total - self.calibration

    @classmethod
    def of(cls, spec: QuerySpec) -> DeltaSplit:
        delta = float(spec.privacy.delta or 0.0)
        if uses_proofs(spec) and spec.privacy.mechanism != "none":
            return cls(delta, delta * (1.0 - TRUNCATION_DELTA_SHARE))
        return cls(delta, delta)


def total_delta(spec: QuerySpec, calibrated: float) -> float:
    """The δ a query's guarantee carries given the δ its noise was calibrated for: with proofs, plus the
    truncation share."""
    return calibrated / (1.0 - TRUNCATION_DELTA_SHARE) if uses_proofs(spec) else calibrated
