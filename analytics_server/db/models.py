"""SQLAlchemy models. Portable types only (String, Integer, Float, LargeBinary, JSON) so SQLite and PostgreSQL
both work; migrations/versions/ mirrors this file.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, DateTime, Float, ForeignKey, Index, Integer, LargeBinary, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    pass


class Query(Base):
    __tablename__ = "queries"

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
    created_by: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


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
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    contributors: Mapped[int] = mapped_column(Integer, default=0)
    sum: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)  # little-endian int64 array
    dropped: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


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


class Device(Base):
    __tablename__ = "devices"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    public_key: Mapped[bytes] = mapped_column(LargeBinary, unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Token(Base):
    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    role: Mapped[str] = mapped_column(String(16))
    label: Mapped[str | None] = mapped_column(String(200), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)


class Nonce(Base):
    """Nonces of signed device requests inside the timestamp window (replay protection across restarts)."""

    __tablename__ = "nonces"

    key: Mapped[str] = mapped_column(String(120), primary_key=True)  # device id + ":" + nonce
    ts: Mapped[float] = mapped_column(Float, index=True)


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
    failed before any cohort finished (the server never saw a noisy sum of it)."""

    __tablename__ = "privacy_charges"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    source: Mapped[str] = mapped_column(String(128), index=True)
    query_id: Mapped[str] = mapped_column(ForeignKey("queries.id"), unique=True)
    epsilon: Mapped[float] = mapped_column(Float)
    delta: Mapped[float] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(16))  # charged | refunded
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    refunded_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
