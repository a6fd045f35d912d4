"""The analyst's query spec (`POST /v1/queries` body), shared by the server and the `fa` CLI.

`QuerySpec` validates the envelope (kind, source, privacy, cohort); the kind validates `params` itself
(`queries.registry.get_kind(kind).parse_params`). Unknown fields are refused so typos surface as 422s. Every
size is bounded (the constants below; the kinds bound their own params, see docs/security/spec.md).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Mechanism = Literal["discrete_gaussian", "skellam", "none"]
Validation = Literal["proofs", "none"]

MAX_EPSILON = 100.0
"""Largest ε a spec may ask for (far above any meaningful guarantee; the server's policy caps it lower)."""
MAX_NOISE_MULTIPLIER = 1e6
"""Largest fixed noise multiplier (the same bound as `queries.dp.calibrate.MAX_NOISE_MULTIPLIER`)."""
MAX_CLIENTS = 1_000_000
"""Largest cohort (`cohort.min_clients`, `cohort.max_clients`)."""
MAX_PHASE_TIMEOUT_S = 3600.0
MAX_KIND_CHARS = 64
MAX_NAME_CHARS = 200
MAX_SOURCE_CHARS = 128
MAX_PARAMS_KEYS = 100
"""Most top-level keys in `params` (each kind refuses keys it does not know)."""


class PrivacySpec(BaseModel):
    """Target (ε, δ) of the whole query and the distributed noise mechanism."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    epsilon: float | None = Field(default=None, gt=0, le=MAX_EPSILON)
    delta: float | None = Field(default=None, gt=0, lt=1)
    mechanism: Mechanism = "none"
    noise_multiplier: float | None = Field(default=None, gt=0, le=MAX_NOISE_MULTIPLIER)
    """Fix the noise multiplier z instead of calibrating it over the kind's round bound: the query then
    stops (keeping what it has) before a round that would exceed epsilon (multi-round kinds, e.g. training)."""
    validation: Validation | None = None
    """"proofs": every device proves in zero knowledge that its contribution (and its noise share, within a tail
    bound) is valid for the kind, and the unmasked sum must open the devices' commitments; "none": no proofs.
    Default: "proofs" when the kind can prove its rounds' contributions, else "none" (docs/validation.md)."""

    @model_validator(mode="after")
    def _needs_budget(self) -> PrivacySpec:
        if self.mechanism != "none":
            missing = [f for f in ("epsilon", "delta") if getattr(self, f) is None]
            if missing:
                raise ValueError(f"{' and '.join(missing)} required when mechanism is {self.mechanism!r}")
        elif self.noise_multiplier is not None:
            raise ValueError("noise_multiplier: only meaningful with a noisy mechanism (mechanism is 'none')")
        return self


DEFAULT_DROPOUT_ALLOWANCE = 0.15
MAX_DROPOUT_ALLOWANCE = 0.5


class CohortSpec(BaseModel):
    """How many devices a round needs, how large one cohort may be, and the per-phase deadline."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    min_clients: int = Field(default=10, ge=2, le=MAX_CLIENTS)
    max_clients: int = Field(default=1000, ge=2, le=MAX_CLIENTS)
    phase_timeout_s: float = Field(default=30.0, gt=0, le=MAX_PHASE_TIMEOUT_S)
    dropout_allowance: float = Field(default=DEFAULT_DROPOUT_ALLOWANCE, ge=0, le=MAX_DROPOUT_ALLOWANCE)
    """The share of a cohort that may drop out after its noise is drawn: each of n devices sizes its noise share for
    n − ⌈a·n⌉ contributors (never fewer than min_clients) and unmasks only when that many survive, so the released
    noise is at most 1/√(1 − a) times what the survivors need (`queries.dp.cohort_threshold`)."""
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

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    kind: str = Field(min_length=1, max_length=MAX_KIND_CHARS)
    name: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    source: str = Field(min_length=1, max_length=MAX_SOURCE_CHARS, pattern=r"^[A-Za-z0-9_.:-]+$")
    params: dict[str, Any] = Field(default_factory=dict, max_length=MAX_PARAMS_KEYS)
    privacy: PrivacySpec = Field(default_factory=PrivacySpec)
    cohort: CohortSpec = Field(default_factory=CohortSpec)
