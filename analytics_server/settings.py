"""Server settings from environment variables (prefix `FA_`) and `fa-server` flags (flags win)."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from queries.dp import Budget, PrivacyPolicy

BENCH_UNMASKED_ENV = "FA_BENCH_UNMASKED"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FA_", extra="ignore")

    db_url: str = "sqlite+aiosqlite:///./fa.db"
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    json_body_limit: int = Field(default=1 << 20, ge=1024, description="bytes; larger JSON bodies get 413")
    binary_body_limit: int = Field(default=64 << 20, ge=1024, description="bytes; larger phase messages get 413")
    cohort_formation_wait_s: float = Field(default=2.0, ge=0, description="after enough devices wait, wait this long for more")
    retry_after_s: float = Field(default=5.0, gt=0, description="`retry_after` given to devices with nothing to do")
    checkin_max_wait_s: float = Field(default=20.0, ge=0, description="cap on a device's long-poll")
    signature_window_s: float = Field(default=300.0, gt=0, description="accepted clock skew of signed device requests")
    threat_model: Literal["semi_honest", "active"] = "semi_honest"
    profile: Literal["demo", "production"] = "demo"
    workers: int = Field(default=2, ge=1, le=64, description="threads for CPU-heavy protocol work")
    budget_epsilon: float = Field(default=10.0, gt=0, description="default total ε per source (privacy-budget ledger)")
    budget_delta: float = Field(default=1e-5, ge=0, lt=1, description="default total δ per source")
    require_noise: bool | None = Field(default=None, description="refuse mechanism none; default: on in production")
    max_epsilon_per_query: float | None = Field(
        default=None, gt=0, description="refuse queries above this ε; default: 2.0 in production, none in demo"
    )
    max_delta_per_query: float | None = Field(
        default=None, gt=0, lt=1, description="refuse queries above this δ; default: 1e-6 in production, none in demo"
    )
    allow_server_trusted_kinds: bool | None = Field(
        default=None,
        description="admit kinds whose guarantee does not hold against the server (TrieHH without noise); "
        "default: off in production, on in demo",
    )
    require_provisioned_budget: bool | None = Field(
        default=None,
        description="refuse sources without an admin-set budget instead of giving them the default; "
        "default: on in production, off in demo",
    )
    spec_check_timeout_s: float = Field(
        default=5.0, gt=0, le=600, description="time limit of parsing and calibrating one submitted spec"
    )

    def default_budget(self) -> Budget:
        """Total (ε, δ) of a source without an admin-set budget."""
        return Budget(self.budget_epsilon, self.budget_delta)

    def privacy_policy(self) -> PrivacyPolicy:
        from analytics_server.privacy import policy_for

        return policy_for(
            self.profile, self.require_noise, self.max_epsilon_per_query, self.max_delta_per_query,
            self.allow_server_trusted_kinds,
        )

    def budget_must_be_provisioned(self) -> bool:
        """Whether a source needs an admin-set budget before queries may use it."""
        if self.require_provisioned_budget is not None:
            return self.require_provisioned_budget
        return self.profile == "production"


def bench_unmasked() -> bool:
    """Benchmark-only switch: run cohorts without masking. Read from the server process environment only;
    no query field can select it."""
    return os.environ.get(BENCH_UNMASKED_ENV) == "1"
