"""Pydantic models of the analyst API responses, and the submit body's documented schema (`query_submit`:
`queries.spec.QuerySpec` with one variant per kind); /v1/openapi.json is generated from these."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, RootModel, SerializerFunctionWrapHandler, model_serializer

from queries.registry import KINDS
from queries.spec import QuerySpec

Status = Literal["pending", "running", "succeeded", "failed", "cancelled"]



QUERY_PAGE, QUERY_PAGE_MAX = 200, 500
"""`GET /v1/queries`: rows per page by default (what the list held before it was paged) and at most."""
CHARGE_PAGE = 1000
"""`GET /v1/budgets/{source}/charges`: rows per page by default and at most."""
BUDGET_PAGE = 1000
"""`GET /v1/budgets`: sources per page by default and at most."""

class CohortProgress(BaseModel):
    """The query's running cohort (from the process that runs it; up to a heartbeat old from another process)."""

    id: str
    phase: str = Field(description="the secagg phase open now")
    devices: int = Field(description="members of the cohort")
    expected: int = Field(description="members still expected to answer in this phase (the rest dropped)")
    answered: int = Field(description="members that answered in this phase so far")
    phase_opened_at: float = Field(description="unix time the phase opened")
    deadline_at: float = Field(description="unix time the phase closes at the latest (cohort.phase_timeout_s)")
    deadline_in_s: float = Field(description="seconds until deadline_at, as of this answer (≥ 0)")


class Progress(BaseModel):
    round: int = Field(description="index of the current round (0-based)")
    rounds_upper_bound: int
    rounds_done: int
    contributors: int = Field(description="devices that contributed to the current round so far")
    need: int | None = Field(default=None, description="contributors the current round needs")
    cohorts: dict[str, int] = Field(default_factory=dict, description="cohorts of the current round by outcome")
    phase: str | None = Field(default=None, description="forming, or the secagg phase of the running cohort")
    devices_eligible: int | None = None
    cohort: CohortProgress | None = Field(default=None, description="the running cohort, while one runs")


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
    created_by: int | None = Field(default=None, description="id of the token that submitted the query")
    spec: dict[str, Any] | None = Field(default=None, description="the submitted spec (GET /v1/queries/{id} only)")


class QueryCreated(QueryView):
    pass


class _OmitNone(BaseModel):
    """Optional fields listed in OMIT_NONE are left out of the JSON when unset (instead of null)."""

    OMIT_NONE: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _omit(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for key in self.OMIT_NONE:
            if data.get(key) is None:
                data.pop(key, None)
        return data


NEXT_DOC = "the cursor of the next page, to pass as `?after=` (docs/server.md, Paging); absent on the last page"


class QueryList(_OmitNone):
    OMIT_NONE = ("next",)

    queries: list[QueryView] = Field(description="newest first; one page (`?limit=`, default 200, at most 500)")
    next: str | None = Field(default=None, description=NEXT_DOC)


class ValueUncertainty(BaseModel):
    std: float = Field(description="standard deviation of the value's noise (first order for derived values)")
    ci95: list[float] = Field(min_length=2, max_length=2, description="95 % interval [lo, hi]")


class ResultWarning(_OmitNone):
    OMIT_NONE = ("path",)
    path: str | None = Field(default=None, description="JSON Pointer of the value concerned; absent: the whole result")
    message: str = Field(description="what is wrong and what to change")


class ResultView(BaseModel):
    id: str
    kind: str
    status: Status = Field(default="succeeded", description="succeeded, or failed with a readable result (e.g. "
                                                             "training that diverged: see error)")
    error: str | None = None
    result: dict[str, Any]
    privacy: dict[str, Any]
    uncertainty: dict[str, ValueUncertainty] = Field(
        default_factory=dict, description="per released noisy value, keyed by its JSON Pointer into result")
    warnings: list[ResultWarning] = Field(default_factory=list)
    table: list[dict[str, Any]] = Field(
        default_factory=list,
        description="the result as tables for display (the kind's `tabulate`, queries.table): per section a title, "
                    "columns (name, label, role key·value·interval·text, unit), rows of cells {value, path?} whose "
                    "path is the value's JSON Pointer into result (its key in uncertainty), an optional chart hint "
                    "{type bar·line, x, y} and a caption")


class PreviewPrivacy(_OmitNone):
    OMIT_NONE = ("validation",)
    epsilon: float | None
    delta: float | None
    mechanism: str
    validation: str | None = None


class PreviewBudget(BaseModel):
    source: str
    remaining_epsilon: float
    remaining_delta: float
    fits: bool = Field(description="whether the source's remaining budget covers this query's charge")


class PreviewValue(_OmitNone):
    OMIT_NONE = ("note", "std_range", "ci95_halfwidth_range")
    path: str = Field(description="JSON Pointer into the result (representative where paths depend on the data)")
    std: float = Field(description="expected noise std at the minimum of contributors")
    ci95_halfwidth: float
    std_range: list[float] | None = Field(default=None, description="[least, largest] std over the cohort sizes the "
                                          "spec allows and what the data may be (rows per device, a data-chosen bound)")
    ci95_halfwidth_range: list[float] | None = None
    note: str | None = None


class PreviewWarning(_OmitNone):
    OMIT_NONE = ("path",)
    path: str | None = None
    message: str


class PreviewView(BaseModel):
    """`POST /v1/queries/preview`: what a query would charge and release, without creating or charging anything."""

    kind: str
    source: str
    privacy: PreviewPrivacy
    rounds: int = Field(description="upper bound on the rounds the query runs")
    t_min: int | None = Field(description="minimum contributors of every noisy sum (null without noise)")
    budget: PreviewBudget
    values: list[PreviewValue]
    warnings: list[PreviewWarning]


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
    excluded: dict[str, str] = Field(default_factory=dict, description="device id → why it was left out of the "
                                     "rest of the query (its validity proof was refused)")


class ProcessLabel(BaseModel):
    id: str
    name: str
    pid: int
    url: str


class Health(BaseModel):
    status: Literal["ok"]
    queries_running: int
    cohorts_running: int
    process: ProcessLabel
    identities: Literal["issuer", "open"] = Field(
        description="`issuer`: devices register only with an identity issuer's token; `open`: any key registers "
                    "(demo profile without an issuer: Sybil-unsafe, docs/identities.md)")
    log_key: Literal["file", "database"] = Field(
        default="file", description="where the transparency log's signing key lives: `file` (FA_LOG_KEY_FILE) or "
        "`database` (generated by the server: anyone with database access could re-sign a rewritten log; "
        "docs/transparency.md)")


class ProcessInfo(ProcessLabel):
    host: str
    started_at: float
    heartbeat_at: float
    live: bool
    leases: list[str] = Field(description="ids of the queries this process runs")
    load: dict[str, Any] = Field(description="queries, running cohorts, devices long-polling, check-ins since start")


class ClusterView(BaseModel):
    processes: list[ProcessInfo]


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


class BudgetList(_OmitNone):
    OMIT_NONE = ("next",)

    budgets: list[BudgetView] = Field(description="by source name; one page (`?limit=`, default and at most 1,000)")
    default_epsilon: float
    default_delta: float
    next: str | None = Field(default=None, description=NEXT_DOC)


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


class WhoAmI(BaseModel):
    token_id: int
    role: str


class ChargeView(BaseModel):
    """One query's charge against a source. Another analyst's query shows no id, kind or name."""

    query_id: str | None
    kind: str | None
    name: str | None
    epsilon: float
    delta: float
    status: Literal["charged", "refunded"]
    charged_at: str
    refunded_at: str | None
    own: bool = Field(description="the calling analyst submitted this query")
    runs: int = Field(default=1, description="runs of the query's (ε, δ) in `epsilon`/`delta`: more than 1 when cohorts' "
                      "sums failed their opening check and their devices contributed again (docs/validation.md)")


class ChargeList(_OmitNone):
    OMIT_NONE = ("next",)

    source: str
    budget: BudgetView
    charges: list[ChargeView] = Field(description="one page, oldest first within it: the first page holds the newest "
                                      "charges (`?limit=`, default and at most 1,000), `next` leads to older ones")
    next: str | None = Field(default=None, description=NEXT_DOC)


class PhaseStatsView(BaseModel):
    count: int
    mean_s: float
    p50_s: float
    p90_s: float
    max_s: float


class AbortReason(BaseModel):
    reason: str
    count: int


class FleetView(BaseModel):
    """The devices and cohorts of every process sharing the database."""

    at: float = Field(description="server unix time of this report (check-ins per second: difference two reports)")
    devices_registered: int
    devices_available: int = Field(description="checked in recently and not in a cohort")
    devices_in_cohorts: int
    checkins_total: int = Field(description="check-ins since the live processes started (from their heartbeats)")
    processes_live: int
    queries: dict[str, int] = Field(description="queries by status")
    cohorts_total: dict[str, int] = Field(description="cohorts by outcome, all time")
    cohorts_recent: dict[str, int] = Field(description="cohorts by outcome formed in the last hour")
    abort_reasons: list[AbortReason] = Field(description="the last hour's abort reasons, most frequent first")
    phase_durations: dict[str, PhaseStatsView] = Field(description="seconds each secagg phase was open, recent cohorts")
    cohorts_sampled: int = Field(description="cohorts the phase durations come from")


class TemplateView(BaseModel):
    kind: str
    title: str
    spec: dict[str, Any] = Field(description="a starter spec, ready to submit against a fleet of the stated size")
    notes: dict[str, str] = Field(description="dotted spec field → what it means")
    text: str = Field(description="the spec as commented JSON (what `fa init KIND` writes)")


class TemplateList(BaseModel):
    templates: list[TemplateView]


class QuotaRequest(BaseModel):
    model_config = {"extra": "forbid"}

    epsilon: float | None = Field(gt=0, allow_inf_nan=False, description="the token's ε quota; null: server default")


def query_submit() -> type[BaseModel]:
    """The body of `POST /v1/queries` as documented: one schema per registered kind — the envelope of
    `QuerySpec` with `kind` fixed to the kind's name and `params` the kind's own `Params` model (with its
    bounds) — discriminated on `kind`. The server validates with the same models (`QuerySpec`, then the
    kind's `Params`), so a body valid against this schema passes both schema steps. `examples()` gives one
    body per kind (from the kind's `Params` examples)."""
    variants: list[type[QuerySpec]] = []
    examples: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        name = kind.name
        extra = kind.Params.model_config.get("json_schema_extra")
        params_examples = (extra.get("examples", []) if isinstance(extra, dict) else []) or [e.params for e in kind.examples]
        bodies = [{"kind": name, "source": "examples", "params": p, "cohort": {"min_clients": 10, "max_clients": 100}}
                  for p in params_examples]
        if bodies:
            examples[name] = bodies[0]
        title = "".join(part.capitalize() for part in name.split("_")) + "QuerySpec"
        namespace: dict[str, Any] = {
            "__doc__": f"`POST /v1/queries` body of a `{name}` query.",
            "__module__": __name__,
            "__annotations__": {"kind": Literal[name], "params": kind.Params},
            "kind": Field(description="the query kind"),
            "params": Field(description=f"the `{name}` kind's parameters"),
            "model_config": ConfigDict(json_schema_extra={"examples": list(bodies)} if bodies else None),
        }
        variants.append(type(title, (QuerySpec,), namespace))
    union = Annotated[Union[tuple(variants)], Field(discriminator="kind")]  # type: ignore[valid-type]  # noqa: UP007

    class QuerySubmit(RootModel[union]):  # type: ignore[valid-type]
        """`POST /v1/queries` body: a query spec, with `params` according to its `kind`."""

        @staticmethod
        def examples() -> dict[str, dict[str, Any]]:
            return examples

    return QuerySubmit
