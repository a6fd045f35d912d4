"""`/v1/openapi.json`: an OpenAPI 3.1 document built from the pydantic models and the route table below."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from analytics_server import api_models as am
from queries import envelope as env
from queries.spec import QuerySpec
from translog import wire as tw

QUERY_SUBMIT = am.query_submit()
# (method, path, summary, request model or "binary", response model or "binary"/None, security)
ROUTES: list[tuple[str, str, str, Any, Any, str]] = [
    ("post", "/v1/queries", "Submit a query", QUERY_SUBMIT, am.QueryCreated, "bearer"),
    ("post", "/v1/queries/preview", "Preview a query: what it would charge and the expected noise of each value it "
     "would release (creates and charges nothing; the same 4xx as submit)", QUERY_SUBMIT, am.PreviewView, "bearer"),
    ("get", "/v1/queries", "List queries", None, am.QueryList, "bearer"),
    ("get", "/v1/queries/{id}", "Query status and progress", None, am.QueryView, "bearer"),
    ("get", "/v1/queries/{id}/result", "Result with the uncertainty of every noisy value and warnings (409 until "
     "succeeded, or failed with a readable result, e.g. diverged training)", None, am.ResultView, "bearer"),
    ("post", "/v1/queries/{id}/cancel", "Cancel a query (409 when finished)", None, am.QueryView, "bearer"),
    ("get", "/v1/queries/{id}/events", "Server-sent events: progress, the query's stored events, end", None, "sse", "bearer"),
    ("post", "/v1/admin/tokens", "Create a token (admin)", am.TokenRequest, am.TokenCreated, "bearer"),
    ("get", "/v1/quota", "The calling token's ε quota and active queries", None, am.QuotaView, "bearer"),
    ("put", "/v1/admin/tokens/{token_id}/quota", "Set a token's ε quota (admin)", am.QuotaRequest, am.QuotaView, "bearer"),
    ("get", "/v1/admin/queries/{id}/contributors", "Contributing devices per round (admin)", None, am.Contributors, "bearer"),
    ("get", "/v1/cluster", "Server processes sharing the database, their leases and load (admin)", None, am.ClusterView, "bearer"),
    ("get", "/v1/budgets", "Privacy-budget ledgers of all sources", None, am.BudgetList, "bearer"),
    ("get", "/v1/budgets/{source}", "Privacy-budget ledger of one source", None, am.BudgetView, "bearer"),
    ("put", "/v1/admin/budgets/{source}", "Set a source's total privacy budget (admin)", am.BudgetRequest, am.BudgetView, "bearer"),
    ("get", "/v1/budgets/{source}/charges", "A source's ledger and its charges over time", None, am.ChargeList, "bearer"),
    ("get", "/v1/fleet", "Devices, check-ins, cohorts by outcome, phase durations", None, am.FleetView, "bearer"),
    ("get", "/v1/whoami", "The calling token's id and role", None, am.WhoAmI, "bearer"),
    ("get", "/v1/templates", "A starter spec per query kind, with notes", None, am.TemplateList, "bearer"),
    ("post", "/v1/device/register", "Register a device identity key", env.RegisterRequest, env.RegisterResponse, "signed"),
    ("post", "/v1/device/checkin", "Check in; long-poll for an assignment", env.CheckinRequest, env.CheckinResponse, "signed"),
    ("get", "/v1/device/cohorts/{cohort_id}", "Cohort status", None, env.CohortStatus, "signed"),
    ("post", "/v1/device/cohorts/{cohort_id}/refusal", "Refuse the assignment under the device's own policy", env.RefusalReport, None, "signed"),
    ("post", "/v1/device/cohorts/{cohort_id}/phases/{phase}", "Send this device's secagg message", "binary", None, "signed"),
    ("get", "/v1/device/cohorts/{cohort_id}/phases/{phase}/next", "Long-poll the server's next secagg message", None, "binary", "signed"),
    ("get", "/v1/log/key", "The transparency log's public key, origin, retired keys and witnesses", None, tw.LogKeyResponse, "none"),
    ("get", "/v1/log/head", "The newest signed tree head, its cosignatures and the newest cosigned head", None,
     tw.LogHeadResponse, "none"),
    ("get", "/v1/log/heads", "Stored signed heads with start ≤ size < end (at most 1,000)", None, tw.LogHeadsResponse, "none"),
    ("get", "/v1/log/entries", "Log entries with start ≤ index < end (at most 1,000)", None, tw.LogEntriesResponse, "none"),
    ("get", "/v1/log/proof/inclusion", "RFC 9162 inclusion proof of entry `index` in the tree of `size`", None,
     tw.ProofResponse, "none"),
    ("get", "/v1/log/proof/consistency", "RFC 9162 consistency proof from tree size `first` to `second`", None,
     tw.ProofResponse, "none"),
    ("post", "/v1/log/cosignatures", "A witness's cosignature of a stored head (keys in FA_LOG_WITNESS_KEYS only)",
     tw.CosignRequest, None, "none"),
    ("get", "/healthz", "Liveness", None, am.Health, "none"),
    ("get", "/metrics", "Prometheus metrics (bearer token of role admin or metrics when FA_METRICS_AUTH is token, the production default)", None, "text", "none"),
    ("get", "/v1/openapi.json", "This document", None, None, "none"),
    ("get", "/", "Redirect to the analyst console", None, "redirect", "none"),
    ("get", "/ui", "Redirect to the analyst console", None, "redirect", "none"),
    ("get", "/ui/", "The analyst console (HTML; signs in with a bearer token kept in the browser tab)", None, "html", "none"),
    ("get", "/ui/{name}", "A file of the analyst console (scripts, styles, vendored chart library)", None, "asset", "none"),
]

def _paging(most: int, default: int, what: str) -> list[dict[str, Any]]:
    """The query parameters of a paged list (docs/server.md, "Paging")."""
    return [
        {"name": "limit", "in": "query", "required": False, "description": f"{what} per page (default {default})",
         "schema": {"type": "integer", "minimum": 1, "maximum": most}},
        {"name": "after", "in": "query", "required": False, "description": "the `next` cursor of the page before",
         "schema": {"type": "string", "maxLength": 600}},
    ]


QUERY_PARAMS: dict[str, list[dict[str, Any]]] = {
    "/v1/queries": _paging(am.QUERY_PAGE_MAX, am.QUERY_PAGE, "queries") + [
        {"name": "spec", "in": "query", "required": False, "description": "include each query's spec",
         "schema": {"type": "boolean"}}],
    "/v1/budgets": _paging(am.BUDGET_PAGE, am.BUDGET_PAGE, "sources"),
    "/v1/budgets/{source}/charges": _paging(am.CHARGE_PAGE, am.CHARGE_PAGE, "charges (the newest page first)"),
}
"""Query parameters of the GET routes that take them."""

_ERROR = {"description": "error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}}


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def build() -> dict[str, Any]:
    models = {m for _, _, _, req, resp, _ in ROUTES for m in (req, resp) if isinstance(m, type)}
    models |= {env.ErrorBody, QuerySpec}  # QuerySpec: the envelope every kind's submit schema extends
    _, defs = models_json_schema(
        [(m, "validation") for m in sorted(models, key=lambda m: m.__name__)],
        ref_template="#/components/schemas/{model}",
    )
    paths: dict[str, Any] = {}
    for method, path, summary, req, resp, security in ROUTES:
        op: dict[str, Any] = {"summary": summary, "responses": {"4XX": _ERROR}}
        params = [seg[1:-1] for seg in path.split("/") if seg.startswith("{")]
        op_params = [{"name": p, "in": "path", "required": True, "schema": {"type": "string"}} for p in params]
        if method == "get":
            op_params += QUERY_PARAMS.get(path, [])
        if op_params:
            op["parameters"] = op_params
        if isinstance(req, type):
            op["requestBody"] = {"required": True, "content": {"application/json": {"schema": _ref(req)}}}
            if hasattr(req, "examples"):  # e.g. one submit body per query kind
                op["requestBody"]["content"]["application/json"]["examples"] = {
                    name: {"summary": f"a {name} query", "value": value} for name, value in req.examples().items()
                }
        elif req == "binary":
            op["requestBody"] = {
                "required": True,
                "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
            }
        ok = "201" if method == "post" and path in ("/v1/queries", "/v1/admin/tokens", "/v1/device/register") else "200"
        if isinstance(resp, type):
            op["responses"][ok] = {"description": "ok", "content": {"application/json": {"schema": _ref(resp)}}}
        elif resp == "binary":
            op["responses"][ok] = {
                "description": "the server's secagg message",
                "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
            }
        elif resp == "sse":
            op["responses"][ok] = {"description": "event stream", "content": {"text/event-stream": {}}}
        elif resp == "text":
            op["responses"][ok] = {"description": "metrics", "content": {"text/plain": {}}}
        elif resp == "redirect":
            op["responses"]["302"] = {"description": "to /ui/", "headers": {"Location": {"schema": {"type": "string"}}}}
        elif resp == "html":
            op["responses"][ok] = {"description": "the console page", "content": {"text/html": {}}}
            op["responses"]["304"] = {"description": "not modified (If-None-Match)"}
        elif resp == "asset":
            op["responses"][ok] = {"description": "the file", "content": {
                t: {} for t in ("text/javascript", "text/css", "text/html", "application/json", "text/plain")}}
            op["responses"]["304"] = {"description": "not modified (If-None-Match)"}
        else:
            op["responses"]["202" if req == "binary" else ok] = {"description": "ok"}
        if security == "bearer":
            op["security"] = [{"bearer": []}]
        elif security == "signed":
            op["description"] = (
                f"Signed with the device's Ed25519 key; header {env.HDR_PROTOCOL}: {env.PROTOCOL_VERSION} "
                "(any other version gets 400); see docs/protocol.md."
            )
        paths.setdefault(path, {})[method] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "fed-analytics server", "version": "1"},
        "paths": paths,
        "components": {
            "schemas": defs.get("$defs", {}),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
