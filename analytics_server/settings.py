"""Server settings from environment variables (prefix `FA_`) and `fa-server` flags (flags win)."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from queries.dp import Budget, PrivacyPolicy

PRODUCTION_ANALYST_EPSILON_QUOTA = 5.0
"""Default per-analyst ε quota of the production profile (the demo profile has none)."""


def parse_origins(raw: str) -> frozenset[str] | None:
    """`device_cors_origins` → the allowed origins (None: any; empty: none); ValueError naming an entry that is not
    scheme://host[:port]. The device API's CORS middleware (analytics_server/http/cors.py) allows these."""
    items = [item.strip().rstrip("/") for item in raw.split(",") if item.strip()]
    if "*" in items:
        if len(items) > 1:
            raise ValueError("device_cors_origins: `*` allows every origin and cannot be combined with others")
        return None
    for item in items:
        parts = urlsplit(item)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path or parts.query or parts.fragment:
            raise ValueError(f"device_cors_origins: {item[:200]!r} is not an origin (scheme://host[:port])")
    return frozenset(items)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FA_", extra="ignore")

    db_url: str = "sqlite+aiosqlite:///./fa.db"
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    json_body_limit: int = Field(default=1 << 20, ge=1024, description="bytes; larger analyst JSON bodies get 413")
    device_json_body_limit: int = Field(
        default=16 << 10, ge=1024, description="bytes; larger registration, check-in and other device JSON bodies get 413"
    )
    binary_body_limit: int = Field(
        default=64 << 20, ge=1024,
        description="bytes; cap on a phase message (each cohort's own limit, from its size and vector length, is lower)",
    )
    body_read_timeout_s: float = Field(default=30.0, gt=0, description="a request body must arrive within this; else 408")
    idle_timeout_s: float = Field(
        default=15.0, gt=0,
        description="a connection without a complete request head for this long (from connect or the last answer) is closed",
    )
    register_rate_per_min: float | None = Field(
        default=None, ge=0, description="registrations per minute per client address (0 = no limit); default 60 in production, 0 in demo"
    )
    register_burst: int = Field(default=20, ge=1, description="registrations one address may make at once before the rate applies")
    metrics_auth: Literal["token", "open"] | None = Field(
        default=None, description="`/metrics` needs a token of role admin or metrics (`token`) or not (`open`); default token in production"
    )
    advertise_url: str | None = Field(
        default=None, max_length=2048,
        description="base URL at which devices reach this process for the cohorts it runs (sent in assignments); "
        "default: http://HOST:PORT, with this machine's host name when HOST is a wildcard address",
    )
    process_name: str | None = Field(
        default=None, max_length=200, description="this process's label in /metrics, /healthz and /v1/cluster; default HOSTNAME:PID"
    )
    lease_ttl_s: float = Field(
        default=30.0, gt=0, le=3600,
        description="a process's query leases (and its entry in /v1/cluster) expire this long after its last heartbeat; "
                    "longer than the event loop's worst stall (a 5,000-device cohort's phase burst stalls it 15-20 s on two cores)",
    )
    heartbeat_s: float = Field(default=2.0, gt=0, le=600, description="how often a process renews its leases")
    cohort_formation_wait_s: float = Field(default=2.0, ge=0, description="after enough devices wait, wait this long for more")
    retry_after_s: float = Field(default=5.0, gt=0, description="`retry_after` given to devices with nothing to do")
    checkin_max_wait_s: float = Field(default=20.0, ge=0, description="cap on a device's long-poll")
    signature_window_s: float = Field(default=300.0, gt=0, description="accepted clock skew of signed device requests")
    threat_model: Literal["active"] = Field(
        default="active",
        description="secure aggregation's server model: always `active` — the consistency round (devices sign the "
        "survivor set and check their neighbours' signatures before unmasking; docs/secagg.md). Devices refuse any "
        "other; the semi-honest variant is measured only in process (`python -m secagg.bench --threat-model semi_honest`)",
    )
    profile: Literal["demo", "production"] = "demo"
    event_loop: Literal["uvloop", "asyncio"] = Field(
        default="uvloop", description="`serve`'s event loop: uvloop's (libuv) where installed, else asyncio's"
    )
    threads: int = Field(default=2, ge=1, le=64, description="threads for CPU-heavy protocol work (close_phase, large message decoding)")
    budget_epsilon: float = Field(default=10.0, gt=0, description="default total ε per source (privacy-budget ledger)")
    budget_delta: float = Field(default=1e-5, ge=0, lt=1, description="default total δ per source")
    require_noise: bool | None = Field(default=None, description="refuse mechanism none; default: on in production")
    max_epsilon_per_query: float | None = Field(
        default=None, gt=0, description="refuse queries above this ε; default: 2.0 in production, none in demo"
    )
    analyst_epsilon_quota: float | None = Field(
        default=None, gt=0, allow_inf_nan=False,
        description="total ε one analyst token's charged queries may hold across all sources within "
        "analyst_quota_window_s (refunded charges excluded; an admin may set a token's own quota); "
        "default: 5.0 in production, none in demo",
    )
    analyst_quota_window_s: float = Field(
        default=30 * 86400.0, ge=0, description="rolling window of the per-analyst ε quota; 0: lifetime"
    )
    max_active_queries_per_analyst: int = Field(
        default=8, ge=1, le=100_000, description="pending + running queries one token may have; more → 429"
    )
    cohort_formation_timeout_s: float = Field(
        default=600.0, gt=0, le=7 * 86400,
        description="a query whose next cohort has not formed after this long fails (spec: cohort.formation_timeout_s)",
    )
    max_consecutive_aborts: int = Field(
        default=5, ge=1, le=10_000, description="a query fails after this many aborted cohorts in a row"
    )
    failed_opening_extra_runs: int = Field(
        default=1, ge=0, le=10,
        description="after a noisy cohort's sum fails its opening check, its members may join another cohort of "
        "the round at the price of one more run of the query's (ε, δ) charged to its source: at most this many "
        "extra runs per query (0: they keep their seats)",
    )
    blame_quorum: int = Field(
        default=2, ge=1, le=20,
        description="leave a device out of a query once it contributed to this many cohorts whose sums failed "
        "their opening check and which share no other device (with fewer such cheaters no honest device is named)",
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
    log_format: Literal["text", "json"] = Field(
        default="text", description="server log lines: `text` or `json` (one JSON object per line, with structured fields)"
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(default="INFO", description="server log level")
    require_validation: bool | None = Field(
        default=None,
        description="refuse privacy.validation \"none\" for kinds that can prove their contributions "
        "(docs/validation.md); default: on in production, off in demo",
    )
    spec_check_timeout_s: float = Field(
        default=5.0, gt=0, le=600, description="time limit of parsing and calibrating one submitted spec"
    )
    device_cors_origins: str = Field(
        default="", max_length=10_000,
        description="comma-separated origins (scheme://host[:port]) whose web pages may call the device API "
        "(/v1/device/*) from a browser, or `*` for any; empty (the default): no cross-origin access "
        "(analytics_server/http/cors.py)",
    )

    issuer_keys: str = Field(
        default="", max_length=100_000,
        description="comma-separated base64 SubjectPublicKeyInfo DER of the identity issuer's RSA keys "
        "(docs/identities.md): registration then needs an identity token signed by one, and only devices holding one "
        "check in; the production profile needs this or issuer_url, the demo profile without either lets any key register "
        "(open registration: Sybil-unsafe, reported in /healthz and every result)",
    )
    issuer_url: str | None = Field(
        default=None, max_length=2048,
        description="the identity issuer (`fa-issuer serve`): its keys are read from URL/v1/issuer/keys at start, "
        "beside any issuer_keys",
    )

    log_key_file: str | None = Field(
        default=None, max_length=4096,
        description="file holding the transparency log's Ed25519 signing key (base64 of a 32-byte seed, "
        "`fa-server log-key FILE` writes one; docs/transparency.md); required in production; unset in demo: a key "
        "generated once and kept in the database (anyone with database access could then re-sign a rewritten log)",
    )
    log_origin: str | None = Field(
        default=None, max_length=200, pattern=r"^[^\n]+$",
        description="the log's name in its signed heads; default `fed-analytics/<key id>`",
    )
    log_previous_keys: str = Field(
        default="", max_length=10_000,
        description="comma-separated base64 Ed25519 public keys of retired log keys (served at /v1/log/key so old "
        "heads stay verifiable after a rotation)",
    )
    log_witness_keys: str = Field(
        default="", max_length=10_000,
        description="comma-separated `name=base64 Ed25519 public key` of the witnesses whose cosignatures "
        "POST /v1/log/cosignatures accepts",
    )

    @field_validator("device_cors_origins")
    @classmethod
    def _origins(cls, v: str) -> str:
        parse_origins(v)  # ValueError naming the bad origin
        return v

    def register_rate(self) -> float:
        """Registrations per minute per address; 0 means unlimited."""
        if self.register_rate_per_min is not None:
            return self.register_rate_per_min
        return 60.0 if self.profile == "production" else 0.0

    def has_issuer(self) -> bool:
        return bool(self.issuer_keys.strip() or self.issuer_url)

    def identity_setup_error(self) -> str | None:
        """Why `serve` must not start with these identity settings, or None. The production profile needs an issuer;
        the demo profile without one registers any key, says so (/healthz, results, its log) and is Sybil-unsafe
        (docs/identities.md)."""
        if self.profile == "production" and not self.has_issuer():
            return ("the production profile needs an identity issuer: set FA_ISSUER_URL to a running "
                    "`fa-issuer serve` (or FA_ISSUER_KEYS to its keys); devices then register only with its identity "
                    "tokens (docs/identities.md)")
        return None

    def log_setup_error(self) -> str | None:
        """Why `serve` must not start with these log settings, or None: the production profile needs its log key in a
        file of its own (a key kept in the database lets anyone with database access re-sign a rewritten log)."""
        if self.profile == "production" and not self.log_key_file:
            return ("the production profile needs the transparency log's key in a file: run `fa-server log-key FILE` "
                    "and set FA_LOG_KEY_FILE=FILE (docs/transparency.md)")
        return None

    def metrics_need_token(self) -> bool:
        return (self.metrics_auth or ("token" if self.profile == "production" else "open")) == "token"

    def default_budget(self) -> Budget:
        """Total (ε, δ) of a source without an admin-set budget."""
        return Budget(self.budget_epsilon, self.budget_delta)

    def analyst_quota(self) -> float | None:
        """Default per-analyst ε quota (None: no quota)."""
        if self.analyst_epsilon_quota is not None:
            return self.analyst_epsilon_quota
        return PRODUCTION_ANALYST_EPSILON_QUOTA if self.profile == "production" else None

    def privacy_policy(self) -> PrivacyPolicy:
        from analytics_server.privacy import policy_for

        return policy_for(
            self.profile, self.require_noise, self.max_epsilon_per_query, self.max_delta_per_query,
            self.allow_server_trusted_kinds,
        )

    def validation_required(self) -> bool:
        """Whether queries of kinds that support validity proofs must use them."""
        if self.require_validation is not None:
            return self.require_validation
        return self.profile == "production"

    def budget_must_be_provisioned(self) -> bool:
        """Whether a source needs an admin-set budget before queries may use it."""
        if self.require_provisioned_budget is not None:
            return self.require_provisioned_budget
        return self.profile == "production"

