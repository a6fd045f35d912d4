"""The analyst's query spec (`POST /v1/queries` body), shared by the server and the `fa` CLI.

`QuerySpec` validates the envelope (kind, source, privacy, cohort); the kind validates `params` itself
(`queries.registry.get_kind(kind).parse_params`). Unknown fields are refused so typos surface as 422s. Every
size is bounded (the constants below; the kinds bound their own params, see docs/security/spec.md).
"""

from __future__ import annotations

import math
import sys
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError, ValidationError

Mechanism = Literal["discrete_gaussian", "skellam", "none"]
Validation = Literal["proofs", "none"]

MIN_EPSILON = 1e-6
"""Smallest ε a spec may ask for (also TrieHH's `params.epsilon`): far below any ε used in practice — at 10⁻⁶ the
noise is already set by δ alone (it calibrates only for δ ≳ 10⁻³) — so a smaller one, down to a subnormal, is a
mistake, refused naming the field."""
MAX_EPSILON = 100.0
"""Largest ε a spec may ask for (far above any meaningful guarantee; the server's policy caps it lower)."""
MIN_DELTA = 1e-30
"""Smallest δ a spec may ask for (also TrieHH's `params.delta`): far below 1/n for any population; the share of δ
that pays for the noise's truncation under proofs must stay a normal float."""
MIN_NOISE_MULTIPLIER = 0.01
"""Smallest fixed noise multiplier: one round at z < 0.01 costs ε > 100 (`MAX_EPSILON`) at any δ, and z² of a
subnormal z is 0."""
MAX_NOISE_MULTIPLIER = 1e6
"""Largest fixed noise multiplier (the same bound as `queries.dp.calibrate.MAX_NOISE_MULTIPLIER`)."""
MAX_CLIENTS = 1_000_000
"""Largest cohort (`cohort.min_clients`, `cohort.max_clients`)."""
MIN_PHASE_TIMEOUT_S = 0.1
"""Shortest `cohort.phase_timeout_s`: below it no device could answer a phase (one request and its crypto), and a
subnormal or other absurdly small float would abort every cohort at once."""
MAX_PHASE_TIMEOUT_S = 3600.0
MIN_FORMATION_TIMEOUT_S = 1.0
"""Shortest `cohort.formation_timeout_s`: a cohort needs devices to check in (they long-poll), which takes seconds."""
MAX_FORMATION_TIMEOUT_S = 86400.0
"""Longest `cohort.formation_timeout_s` (one day)."""
MAX_KIND_CHARS = 64
MAX_NAME_CHARS = 200
MAX_SOURCE_CHARS = 128
MAX_PARAMS_KEYS = 100
"""Most top-level keys in `params` (each kind refuses keys it does not know)."""
MAX_SAFE_INTEGER = 2**53 - 1
"""Largest integer (in magnitude) anywhere in a spec: the spec is hashed as canonical JSON (RFC 8785) by the server's
transparency log and by every device's task digest, and canonical JSON holds no larger integer exactly (I-JSON,
RFC 7493 §2.2)."""


class PrivacySpec(BaseModel):
    """Target (ε, δ) of the whole query and the distributed noise mechanism."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    epsilon: float | None = Field(default=None, ge=MIN_EPSILON, le=MAX_EPSILON)
    """The query's total ε, in [1e-6, 100]."""
    delta: float | None = Field(default=None, ge=MIN_DELTA, lt=1)
    """The query's total δ, in [1e-30, 1)."""
    mechanism: Mechanism = "none"
    noise_multiplier: float | None = Field(default=None, ge=MIN_NOISE_MULTIPLIER, le=MAX_NOISE_MULTIPLIER)
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
    phase_timeout_s: float = Field(default=30.0, ge=MIN_PHASE_TIMEOUT_S, le=MAX_PHASE_TIMEOUT_S)
    """Seconds a secure-aggregation phase waits for slow devices, in [0.1, 3600]."""
    dropout_allowance: float = Field(default=DEFAULT_DROPOUT_ALLOWANCE, ge=0, le=MAX_DROPOUT_ALLOWANCE)
    """The share of a cohort that may drop out after its noise is drawn: each of n devices sizes its noise share for
    n − ⌈a·n⌉ contributors (never fewer than min_clients) and unmasks only when that many survive, so the released
    noise is at most 1/√(1 − a) times what the survivors need (`queries.dp.cohort_threshold`)."""
    formation_timeout_s: float | None = Field(default=None, ge=MIN_FORMATION_TIMEOUT_S, le=MAX_FORMATION_TIMEOUT_S)
    """Fail the query when its next cohort has not formed after this many seconds, in [1, 86400] (default: the
    server's FA_COHORT_FORMATION_TIMEOUT_S); an unspent privacy charge is then refunded."""

    @model_validator(mode="after")
    def _ordered(self) -> CohortSpec:
        if self.max_clients < self.min_clients:
            raise ValueError(f"max_clients ({self.max_clients}) must be ≥ min_clients ({self.min_clients})")
        return self


Path = tuple[str | int, ...]


def _unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate ("\\ud800" in the JSON text)
        return False
    return True


def json_problem(value: Any) -> tuple[Path, str] | None:
    """The first value inside `value` (in document order) that a spec may not hold — what canonical JSON cannot (an
    integer beyond ±MAX_SAFE_INTEGER, NaN or an infinity, a string or key with a lone surrogate) and subnormal
    numbers (no parameter means one: below 2.2e-308 a float loses precision, and arithmetic on it underflows to 0 or
    overflows) — with its path; None when all fit."""
    stack: list[tuple[Path, Any]] = [((), value)]
    while stack:
        path, item = stack.pop()
        if item is None or isinstance(item, bool):
            continue
        if isinstance(item, int):
            if abs(item) > MAX_SAFE_INTEGER:
                digits = len(str(abs(item))) if abs(item) < 10**4000 else "thousands of"
                shown = str(item) if abs(item) < 10**30 else f"an integer of {digits} digits"
                return path, f"{shown} is beyond ±(2^53 − 1), the integers a JSON number holds exactly"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return path, "must be a finite number"
            if item != 0 and abs(item) < sys.float_info.min:
                return path, f"{item!r} is a subnormal number; use 0 or a number of magnitude ≥ 2.2e-308"
        elif isinstance(item, str):
            if not _unicode(item):
                return path, "must be valid Unicode text (it holds a lone surrogate)"
        elif isinstance(item, dict):
            for key in item:
                if not isinstance(key, str) or not _unicode(key):
                    return path, "keys must be valid Unicode text (one holds a lone surrogate)"
            stack.extend((path + (key,), v) for key, v in reversed(list(item.items())))
        elif isinstance(item, list):
            stack.extend((path + (i,), v) for i, v in reversed(list(enumerate(item))))
        else:
            return path, f"not a JSON value ({type(item).__name__})"
    return None


class QuerySpec(BaseModel):
    """Body of `POST /v1/queries`."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    kind: str = Field(min_length=1, max_length=MAX_KIND_CHARS)
    name: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    source: str = Field(min_length=1, max_length=MAX_SOURCE_CHARS, pattern=r"^[A-Za-z0-9_.:-]+$")
    params: dict[str, Any] = Field(default_factory=dict, max_length=MAX_PARAMS_KEYS)
    privacy: PrivacySpec = Field(default_factory=PrivacySpec)
    cohort: CohortSpec = Field(default_factory=CohortSpec)

    @model_validator(mode="before")
    @classmethod
    def _json_values(cls, data: Any) -> Any:
        """The spec is stored and hashed as canonical JSON, and `params` is kept as sent (the kind validates it): refuse,
        naming the field, any value `json_problem` finds, also where a kind takes any value (a model factory's keys)."""
        problem = json_problem(data) if isinstance(data, dict) else None
        if problem is not None:
            path, message = problem
            error = InitErrorDetails(type=PydanticCustomError("json_value", message), loc=path, input=None)
            raise ValidationError.from_exception_data(cls.__name__, [error])
        return data
