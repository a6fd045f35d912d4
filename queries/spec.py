"""The analyst's query spec (`POST /v1/queries` body), shared by the server and the `fa` CLI.

`QuerySpec` validates the envelope (kind, source, privacy, cohort); the kind validates `params` itself
(`queries.registry.get_kind(kind).parse_params`). Unknown fields are refused so typos surface as 422s.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Mechanism = Literal["discrete_gaussian", "skellam", "none"]


class PrivacySpec(BaseModel):
    """Target (ε, δ) of the whole query and the distributed noise mechanism."""

    model_config = ConfigDict(extra="forbid")

    epsilon: float | None = Field(default=None, gt=0)
    delta: float | None = Field(default=None, gt=0, lt=1)
    mechanism: Mechanism = "none"
    noise_multiplier: float | None = Field(default=None, gt=0)
    """Fix the noise multiplier z instead of calibrating it over the kind's round bound: the query then
    stops (keeping what it has) before a round that would exceed epsilon (multi-round kinds, e.g. training)."""

    @model_validator(mode="after")
    def _needs_budget(self) -> PrivacySpec:
        if self.mechanism != "none":
            missing = [f for f in ("epsilon", "delta") if getattr(self, f) is None]
            if missing:
                raise ValueError(f"{' and '.join(missing)} required when mechanism is {self.mechanism!r}")
        elif self.noise_multiplier is not None:
            raise ValueError("noise_multiplier: only meaningful with a noisy mechanism (mechanism is 'none')")
        return self


class CohortSpec(BaseModel):
    """How many devices a round needs, how large one cohort may be, and the per-phase deadline."""

    model_config = ConfigDict(extra="forbid")

    min_clients: int = Field(default=10, ge=2, le=1_000_000)
    max_clients: int = Field(default=1000, ge=2, le=1_000_000)
    phase_timeout_s: float = Field(default=30.0, gt=0, le=3600)
    formation_timeout_s: float | None = Field(default=None, gt=0, le=86400)
    """Fail the query when its next cohort has not formed after this long (default: the server's
    FA_COHORT_FORMATION_TIMEOUT_S); an unspent privacy charge is then refunded."""

    @model_validator(mode="after")
    def _ordered(self) -> CohortSpec:
        if self.max_clients < self.min_clients:
            raise ValueError(f"max_clients ({self.max_clients}) must be ≥ min_clients ({self.min_clients})")
        return self


class QuerySpec(BaseModel):
    """Body of `POST /v1/queries`."""

    model_config = ConfigDict(extra="forbid")

    kind: str = Field(min_length=1, max_length=64)
    name: str | None = Field(default=None, max_length=200)
    source: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")
    params: dict[str, Any] = Field(default_factory=dict)
    privacy: PrivacySpec = Field(default_factory=PrivacySpec)
    cohort: CohortSpec = Field(default_factory=CohortSpec)
