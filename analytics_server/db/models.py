"""SQLAlchemy models. Portable types only (String, Integer, Float, LargeBinary, JSON) so SQLite and PostgreSQL
both work; migrations/versions/ mirrors this file.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, ClassVar

from sqlalchemy import JSON, BigInteger, Boolean, DateTime, Float, ForeignKey, Index, Integer, LargeBinary, String, Table, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    __table__: ClassVar[Table]  # every model here is mapped to a Core Table (the base class declares a FromClause)


class Query(Base):
    __tablename__ = "queries"
    __table_args__ = (
        # the keyset pages of GET /v1/queries (newest first by created_at, id): an analyst's own, and all (admins)
        Index("ix_queries_created_by_created_at", "created_by", "created_at", "id"),
        Index("ix_queries_created_at", "created_at", "id"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    kind: Mapped[str] = mapped_column(String(64))
    name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    source: Mapped[str] = mapped_column(String(128))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    calibration: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    status: Mapped[str] = mapped_column(String(16), index=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    state: Mapped[dict[str, Any]] = mapped_column(JSON)
    current_round: Mapped[int] = mapped_column(Integer, default=0)
    rounds_upper_bound: Mapped[int] = mapped_column(Integer, default=1)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    privacy: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    uncertainty: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    """Per released noisy value (JSON Pointer into `result`): its noise std and 95 % interval."""
    warnings: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)
    """What the analyst must know about the result: [{"path"?, "message"}]."""
    created_by: Mapped[int | None] = mapped_column(Integer, nullable=True)
    """Id of the token that submitted the query: analysts see and cancel only their own queries."""
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    lease_owner: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)
    """Id of the server process running the query (`processes.id`); another takes over after `lease_expires`."""
    lease_expires: Mapped[float | None] = mapped_column(Float, nullable=True)
    """Unix time at which the lease lapses unless its owner renews it (heartbeat)."""
    progress: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    """The owner's live progress (phase, eligible devices), stored at each heartbeat for the other processes."""


class Round(Base):
    __tablename__ = "rounds"
    __table_args__ = (UniqueConstraint("query_id", "index", name="uq_rounds_query_index"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    query_id: Mapped[str] = mapped_column(ForeignKey("queries.id"), index=True)
    index: Mapped[int] = mapped_column(Integer)
    plan: Mapped[dict[str, Any]] = mapped_column(JSON)
    noise: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    bits: Mapped[int] = mapped_column(Integer)
    need: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))  # collecting | decoded
    aggregate: Mapped[bytes] = mapped_column(LargeBinary)  # little-endian int64 array, Σ finished cohorts
    contributors: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    decoded_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    sampling_secret: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    """Key of the round's sampling coins (`analytics_server.sampling`); set when a sampled round first forms a cohort."""


class Cohort(Base):
    __tablename__ = "cohorts"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    query_id: Mapped[str] = mapped_column(ForeignKey("queries.id"), index=True)
    round_id: Mapped[int] = mapped_column(ForeignKey("rounds.id"), index=True)
    status: Mapped[str] = mapped_column(String(16), index=True)  # running | finished | aborted
    n: Mapped[int] = mapped_column(Integer)
    secagg: Mapped[dict[str, Any]] = mapped_column(JSON)
    mode: Mapped[str] = mapped_column(String(16), default="secagg")
    phase: Mapped[int] = mapped_column(Integer, default=0)
    masked_input_closed: Mapped[bool] = mapped_column(Boolean, default=False)
    """True once the cohort's masked-input phase closed: from then on the server may learn the noisy sum, so
    the query's privacy charge is never refunded (docs/security/tenancy.md)."""
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    contributors: Mapped[int] = mapped_column(Integer, default=0)
    sum: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)  # little-endian int64 array
    dropped: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    owner: Mapped[str | None] = mapped_column(String(32), nullable=True)
    """Id of the server process that runs the cohort (in memory) and serves its phase messages."""


class CohortMember(Base):
    """A device's seat in a cohort. Unique per (round, device): a device is in at most one live or
    finished cohort of a round; seats of aborted cohorts are deleted so their devices may join again."""

    __tablename__ = "cohort_members"
    __table_args__ = (UniqueConstraint("round_id", "device_id", name="uq_members_round_device"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cohort_id: Mapped[str] = mapped_column(ForeignKey("cohorts.id"), index=True)
    round_id: Mapped[int] = mapped_column(ForeignKey("rounds.id"))
    device_id: Mapped[str] = mapped_column(ForeignKey("devices.id"), index=True)
    party: Mapped[int] = mapped_column(Integer)
    contributed: Mapped[bool] = mapped_column(Boolean, default=False)


class QueryExclusion(Base):
    """A device left out of every later cohort of a query: its validity proof was refused there (a device that
    sent a proof that does not verify is misbehaving; docs/validation.md, "Cheaters")."""

    __tablename__ = "query_exclusions"

    query_id: Mapped[str] = mapped_column(ForeignKey("queries.id"), primary_key=True)
    device_id: Mapped[str] = mapped_column(ForeignKey("devices.id"), primary_key=True)
    reason: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class FailedSum(Base):
    """A device that contributed to a cohort whose sum failed the opening check (docs/validation.md, "A failed
    opening"): at least one contributor of that cohort masked another vector than it proved."""

    __tablename__ = "failed_sums"

    cohort_id: Mapped[str] = mapped_column(ForeignKey("cohorts.id"), primary_key=True)
    device_id: Mapped[str] = mapped_column(ForeignKey("devices.id"), primary_key=True)
    query_id: Mapped[str] = mapped_column(ForeignKey("queries.id"), index=True)
    round_index: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Device(Base):
    __tablename__ = "devices"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    public_key: Mapped[bytes] = mapped_column(LargeBinary, unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    identity_token: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    """The issuer's token vouching for `public_key` (docs/identities.md); None: registered without an issuer."""


class Token(Base):
    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str | None] = mapped_column(String(16), nullable=True, index=True)
    """The token's first characters (shown by `fa-server token list`, accepted by `token revoke`)."""
    role: Mapped[str] = mapped_column(String(16))
    label: Mapped[str | None] = mapped_column(String(200), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)
    epsilon_quota: Mapped[float | None] = mapped_column(Float, nullable=True)
    """Admin-set per-analyst ε quota of this token; None: the server default (FA_ANALYST_EPSILON_QUOTA)."""


class Nonce(Base):
    """Nonce of a state-changing signed device request, kept until no request carrying it can pass the
    timestamp check again: `expires_at` = max(received, timestamp) + signature window (unix seconds).
    The primary key (device, nonce) makes a replay an INSERT conflict, in every server process."""

    __tablename__ = "nonces"

    device_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    nonce: Mapped[str] = mapped_column(String(64), primary_key=True)
    expires_at: Mapped[float] = mapped_column(Float, index=True)


class Event(Base):
    __tablename__ = "events"
    __table_args__ = (Index("ix_events_query", "query_id", "id"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    query_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    cohort_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    type: Mapped[str] = mapped_column(String(64))
    data: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class PrivacyBudget(Base):
    """An admin-set total (ε, δ) for a source; sources without a row use the configured default."""

    __tablename__ = "privacy_budgets"

    source: Mapped[str] = mapped_column(String(128), primary_key=True)
    total_epsilon: Mapped[float] = mapped_column(Float)
    total_delta: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class PrivacyCharge(Base):
    """One query's cost against its source's budget: `charged` at submit, `refunded` if it was cancelled or
    failed before any masked-input phase of its cohorts closed (the server could not have seen a sum of it)."""

    __tablename__ = "privacy_charges"
    __table_args__ = (Index("ix_privacy_charges_source_id", "source", "id"),)  # a source's charges, paged by id

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    source: Mapped[str] = mapped_column(String(128))
    query_id: Mapped[str] = mapped_column(ForeignKey("queries.id"), unique=True)
    epsilon: Mapped[float] = mapped_column(Float)
    delta: Mapped[float] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(16))  # charged | refunded
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    runs: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    """Runs of the query's (ε, δ) charged: 1 at submit, one more each time a failed opening let its devices' data
    enter a second sum of a round (`epsilon`/`delta` are the totals, runs × the query's)."""
    refunded_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class LedgerLock(Base):
    """One row per lock name (`source:<name>`, `analyst:<token id>`), locked `FOR UPDATE` on PostgreSQL while a
    privacy charge is checked and inserted, so charges from several server processes serialise (on SQLite
    the charge runs in a `BEGIN IMMEDIATE` transaction instead)."""

    __tablename__ = "ledger_locks"

    name: Mapped[str] = mapped_column(String(160), primary_key=True)


class ServerProcess(Base):
    """One `fa-server serve` process: registered at startup, heartbeat every `FA_HEARTBEAT_S`. It is live while
    its heartbeat is younger than `FA_LEASE_TTL_S`; its query leases lapse with it."""

    __tablename__ = "processes"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    url: Mapped[str] = mapped_column(String(2048))
    """Advertised base URL: where devices send the phase requests of the cohorts this process runs."""
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[float] = mapped_column(Float)
    heartbeat_at: Mapped[float] = mapped_column(Float, index=True)
    stopped: Mapped[bool] = mapped_column(Boolean, default=False)
    load: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


class DevicePresence(Base):
    """A device's availability and current assignment, shared by every process: a check-in (at any process)
    sets `available_until`; the process forming a cohort claims free devices by setting `cohort_id`
    (conditionally, so two processes never seat one device twice) and stores each device's `assignment`,
    which the process holding the device's long-poll then delivers. Cleared when the device's cohort ends
    or drops it."""

    __tablename__ = "device_presence"

    device_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    available_until: Mapped[float] = mapped_column(Float, index=True)
    cohort_id: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)
    assignment: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), nullable=True)


class LogEntry(Base):
    """One transparency-log leaf (docs/transparency.md): the entry's RFC 8785 JSON exactly as hashed, and the hash."""

    __tablename__ = "log_entries"

    idx: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    type: Mapped[str] = mapped_column(String(16))
    query_id: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)
    cohort_id: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)
    body: Mapped[str] = mapped_column(Text)
    leaf_hash: Mapped[bytes] = mapped_column(LargeBinary(32))


class LogNode(Base):
    """The hash of one complete subtree of the log's Merkle tree above the leaves (`translog.merkle.Node`: level ≥ 1,
    covering leaves [idx·2^level, (idx+1)·2^level)), written in the transaction that appends the leaf completing it;
    level 0 is `LogEntry.leaf_hash`. A root or proof reads O(log n) of them."""

    __tablename__ = "log_nodes"

    level: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    idx: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    hash: Mapped[bytes] = mapped_column(LargeBinary(32))


class LogHead(Base):
    """A signed tree head: one per transaction that appended to the log."""

    __tablename__ = "log_heads"

    size: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    root: Mapped[bytes] = mapped_column(LargeBinary(32))
    timestamp_ms: Mapped[int] = mapped_column(BigInteger)
    origin: Mapped[str] = mapped_column(String(200))
    key_id: Mapped[str] = mapped_column(String(16))
    signature: Mapped[bytes] = mapped_column(LargeBinary(64))


class LogCosignature(Base):
    """A witness's cosignature of a stored head."""

    __tablename__ = "log_cosignatures"

    size: Mapped[int] = mapped_column(BigInteger, ForeignKey("log_heads.size"), primary_key=True)
    key_id: Mapped[str] = mapped_column(String(16), primary_key=True)
    witness: Mapped[str] = mapped_column(String(100))
    time: Mapped[int] = mapped_column(BigInteger)
    signature: Mapped[bytes] = mapped_column(LargeBinary(64))


class LogKey(Base):
    """The log's signing key when no FA_LOG_KEY_FILE is set (generated once; demo only)."""

    __tablename__ = "log_keys"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    seed: Mapped[bytes] = mapped_column(LargeBinary(32))
