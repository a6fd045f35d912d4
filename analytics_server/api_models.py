"""Pydantic models of the analyst API responses (request body: `queries.spec.QuerySpec`); /v1/openapi.json
is generated from these."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

Status = Literal["pending", "running", "succeeded", "failed", "cancelled"]


class Progress(BaseModel):
    round: int = Field(description="index of the current round (0-based)")
    rounds_upper_bound: int
    rounds_done: int
    contributors: int = Field(description="devices that contributed to the current round so far")
    need: int | None = Field(default=None, description="contributors the current round needs")
    cohorts: dict[str, int] = Field(default_factory=dict, description="cohorts of the current round by outcome")
    phase: str | None = Field(default=None, description="forming, or the secagg phase of the running cohort")
    devices_eligible: int | None = None


class QueryView(BaseModel):
    id: str
    kind: str
    name: str | None = None
    source: str
    status: Status
    progress: Progress
    error: str | None = None
    created_at: str
    finished_at: str | None = None


class QueryCreated(QueryView):
    pass


class QueryList(BaseModel):
    queries: list[QueryView]


class ResultView(BaseModel):
    id: str
    kind: str
    result: dict[str, Any]
    privacy: dict[str, Any]


class TokenRequest(BaseModel):
    role: Literal["analyst", "admin", "metrics"]
    label: str | None = Field(default=None, max_length=200)


class TokenCreated(BaseModel):
    token: str
    role: str
    id: int | None = Field(default=None, description="token id (for PUT /v1/admin/tokens/{token_id}/quota)")


class Contributors(BaseModel):
    query_id: str
    rounds: dict[str, list[str]] = Field(description="round index → device ids whose input is in the round's sum")


class Health(BaseModel):
    status: Literal["ok"]
    queries_running: int
    cohorts_running: int


class BudgetView(BaseModel):
    """A source's privacy-budget ledger (basic composition of its queries' target (ε, δ))."""

    source: str
    total_epsilon: float
    total_delta: float
    spent_epsilon: float
    spent_delta: float
    remaining_epsilon: float
    remaining_delta: float
    queries_charged: int = Field(description="noisy queries currently charged (refunded ones excluded)")
    configured: bool = Field(description="true when an admin set the total; false: the server default")


class BudgetList(BaseModel):
    budgets: list[BudgetView]
    default_epsilon: float
    default_delta: float


class BudgetRequest(BaseModel):
    model_config = {"extra": "forbid"}

    epsilon: float = Field(gt=0, allow_inf_nan=False, description="the source's total ε")
    delta: float = Field(ge=0, lt=1, description="the source's total δ")


class QuotaView(BaseModel):
    """One analyst token's limits: ε of its charged queries within the window, and its active queries."""

    token_id: int
    epsilon_quota: float | None = Field(description="null: no per-analyst ε quota")
    epsilon_used: float = Field(description="ε of this token's charged (not refunded) queries within the window")
    epsilon_remaining: float | None
    window_s: float = Field(description="rolling window of the quota in seconds; 0: lifetime")
    configured: bool = Field(description="true when an admin set this token's quota; false: the server default")
    active_queries: int = Field(description="pending + running queries of this token")
    max_active_queries: int | None


class QuotaRequest(BaseModel):
    model_config = {"extra": "forbid"}

    epsilon: float | None = Field(gt=0, allow_inf_nan=False, description="the token's ε quota; null: server default")
