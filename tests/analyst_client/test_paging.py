"""Histories that grow: every list route pages by cursor to the end, the client follows the cursors, and `fa audit
--token` compares every query and every charge, not the first page.

The server is the real app on a migrated SQLite file. Its history is written through the store in one transaction,
as the server records a submit (the query row, its charge row, and the `query` + `charge` log entries): 5,000
queries of one analyst over source "words" (a run of 1,000 of them created in the same microsecond, so the keyset's
tie on id is exercised), and 10 of another analyst over "app.theme". Everything is read back through the HTTP
routes."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from sqlalchemy import update

from analyst_client import cli as analyst_cli
from analyst_client.audit import AuditReport, audit_log
from analyst_client.client import AnalystClient
from analytics_server.db.models import PrivacyCharge, Query
from analytics_server.db.store import Store
from analytics_server.db.translog_store import LOG_LOCK
from analytics_server.state import STATE
from translog import entries as te

N = 5000
OTHERS = 10
TAMPERED = 4500
"""The 4,500th query listed (newest first; one of the run created in the same microsecond): the one the audit must
find altered. It is beyond the first page of every list (and beyond the newest 200 queries and 1,000 charges the
routes showed unpaged)."""
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=timezone.utc)
EPSILON, DELTA = 0.001, 1e-9

Json = dict[str, Any]


def _qid(i: int) -> str:
    return hashlib.sha256(f"paging-{i}".encode()).hexdigest()[:16]  # random-looking: ids do not follow creation


def _created(i: int) -> datetime:
    return T0 if 1000 <= i < 2000 else T0 + timedelta(microseconds=1000 * i)  # a tie over 1,000 queries


def _newest_first(created: list[str]) -> list[str]:
    """The order of GET /v1/queries: created_at, then id, descending."""
    return [qid for _, qid in sorted(((_created(i), qid) for i, qid in enumerate(created)), reverse=True)]


async def _fill(store: Store, analyst: int, other: int, n: int = N) -> list[str]:
    """Writes the history of `n` queries; returns the analyst's query ids in creation order."""
    mine = [(i, _qid(i), "words", analyst) for i in range(n)]
    theirs = [(n + k, _qid(n + k), "app.theme", other) for k in range(OTHERS)]
    entries: list[Json] = []
    async with store.db.tx([LOG_LOCK]) as s:
        for i, qid, source, owner in mine + theirs:
            spec = {"kind": "histogram", "name": f"q{i}", "source": source, "params": {"buckets": ["a", "b"]}}
            at = _created(i)
            s.add(Query(id=qid, kind="histogram", name=f"q{i}", source=source, spec=spec, status="cancelled", state={},
                        current_round=0, rounds_upper_bound=1, created_by=owner, created_at=at, updated_at=at,
                        finished_at=at))
            ms = int(at.timestamp() * 1000)
            entries += [te.query_entry(qid, source, "histogram", spec, ms),
                        te.charge_entry(qid, source, EPSILON, DELTA, ms)]
        await s.flush()  # the queries before their charges (a foreign key)
        for i, qid, source, _ in mine + theirs:
            s.add(PrivacyCharge(source=source, query_id=qid, epsilon=EPSILON, delta=DELTA, status="charged",
                                created_at=_created(i)))
        await store.log.append(s, entries)
    return [qid for _, qid, _, _ in mine]


async def _history(start: Callable[..., Awaitable[TestServer]], n: int) -> Json:
    server = await start()
    store = server.app[STATE].store
    tokens = {name: await store.tokens.create(role) for name, role in (("analyst", "analyst"), ("other", "analyst"),
                                                                      ("admin", "admin"))}
    ids = {}
    for name in ("analyst", "other"):
        info = await store.tokens.lookup(tokens[name])
        assert info is not None
        ids[name] = info.id
    created = await _fill(store, ids["analyst"], ids["other"], n)
    return {"server": server, "store": store, "url": str(server.make_url("")).rstrip("/"), "created": created,
            "tokens": tokens}


@pytest.fixture
async def history(start_app_server: Callable[..., Awaitable[TestServer]]) -> Json:
    """The 5,000 queries."""
    return await _history(start_app_server, N)


@pytest.fixture
async def short_history(start_app_server: Callable[..., Awaitable[TestServer]]) -> Json:
    """Three queries: enough for cursors."""
    return await _history(start_app_server, 3)


async def _get(http: aiohttp.ClientSession, url: str, token: str) -> tuple[int, Json]:
    async with http.get(url, headers={"Authorization": f"Bearer {token}"}) as r:
        return r.status, await r.json()


async def _walk(http: aiohttp.ClientSession, url: str, token: str, key: str) -> list[Json]:
    """Every page of a list route, following `next`; the pages as served."""
    pages: list[Json] = []
    cursor: str | None = None
    while True:
        sep = "&" if "?" in url else "?"
        status, page = await _get(http, url + (f"{sep}after={cursor}" if cursor else ""), token)
        assert status == 200, page
        pages.append(page)
        assert len(pages) <= N, "the cursors do not end"
        cursor = page.get("next")
        if cursor is None:
            assert "next" not in page  # the last page has the shape of the list before it was paged
            return pages


async def test_every_query_and_charge_is_listed_through_the_routes_and_the_client(history: Json) -> None:
    url, tokens, created = history["url"], history["tokens"], history["created"]
    newest_first = _newest_first(created)
    async with aiohttp.ClientSession() as http:
        pages = await _walk(http, f"{url}/v1/queries?limit=500", tokens["analyst"], "queries")
        listed = [q["id"] for p in pages for q in p["queries"]]
        assert len(pages) == N // 500 and listed == newest_first  # all of them, each once, newest first
        assert all(q["spec"] is None for p in pages for q in p["queries"])

        status, first = await _get(http, f"{url}/v1/queries", tokens["analyst"])
        assert status == 200 and [q["id"] for q in first["queries"]] == newest_first[:200] and first["next"]
        status, specs = await _get(http, f"{url}/v1/queries?limit=3&spec=true", tokens["analyst"])
        assert [q["spec"]["name"] for q in specs["queries"]] == [f"q{N - 1}", f"q{N - 2}", f"q{N - 3}"]

        admin_pages = await _walk(http, f"{url}/v1/queries?limit=333", tokens["admin"], "queries")
        assert len({q["id"] for p in admin_pages for q in p["queries"]}) == N + OTHERS

        # the charges: the first page holds the newest, oldest first within it; `next` leads back in time
        pages = await _walk(http, f"{url}/v1/budgets/words/charges?limit=700", tokens["analyst"], "charges")
        assert [len(p["charges"]) for p in pages] == [700] * 7 + [100]
        charges = [c for p in reversed(pages) for c in p["charges"]]
        assert [c["query_id"] for c in charges] == created and all(c["own"] for c in charges)
        status, first = await _get(http, f"{url}/v1/budgets/words/charges", tokens["analyst"])
        assert [c["query_id"] for c in first["charges"]] == created[-1000:] and first["budget"]["queries_charged"] == N

        status, other = await _get(http, f"{url}/v1/budgets/app.theme/charges", tokens["analyst"])
        assert status == 200 and "next" not in other and len(other["charges"]) == OTHERS
        assert all(c["query_id"] is None and not c["own"] for c in other["charges"])  # another analyst's

        pages = await _walk(http, f"{url}/v1/budgets?limit=1", tokens["analyst"], "budgets")
        assert [b["source"] for p in pages for b in p["budgets"]] == ["app.theme", "words"]

    api = AnalystClient(url, tokens["analyst"])
    seen: list[int] = []
    queries = await asyncio.to_thread(api.queries, on_page=seen.append)
    assert [q["id"] for q in queries] == newest_first and seen == list(range(500, N + 1, 500))
    ledger = await asyncio.to_thread(api.charges, "words")
    assert [c["query_id"] for c in ledger["charges"]] == created and "next" not in ledger
    assert [c["query_id"] for c in (await asyncio.to_thread(api.charges, "words", page_size=999))["charges"]] == created
    assert [b["source"] for b in (await asyncio.to_thread(api.budgets))["budgets"]] == ["app.theme", "words"]
    assert len(await asyncio.to_thread(api.queries, most=1234)) == 1234


@pytest.mark.parametrize(("path", "field", "status"), [
    ("/v1/queries?limit=0", "limit", 400),
    ("/v1/queries?limit=501", "limit", 400),
    ("/v1/queries?limit=ten", "limit", 400),
    ("/v1/budgets/words/charges?limit=1001", "limit", 400),
    ("/v1/budgets?limit=-1", "limit", 400),
    ("/v1/queries?after=bm90IGEgY3Vyc29y", "after", 400),  # base64 of "not a cursor"
    ("/v1/queries?after=%%%", "after", 400),
    ("/v1/queries?spec=maybe", "spec", 400),
    ("/v1/budgets?after=" + "A" * 700, "after", 400),
])
async def test_a_bad_limit_or_cursor_is_a_400_naming_the_field(short_history: Json, path: str, field: str,
                                                               status: int) -> None:
    async with aiohttp.ClientSession() as http:
        got, body = await _get(http, short_history["url"] + path, short_history["tokens"]["analyst"])
    assert got == status and body["error"].startswith(f"{field}:"), body
    assert body["detail"][0]["field"] == field


async def test_a_cursor_of_another_list_is_refused(short_history: Json) -> None:
    url, token = short_history["url"], short_history["tokens"]["analyst"]
    async with aiohttp.ClientSession() as http:
        _, queries = await _get(http, f"{url}/v1/queries?limit=1", token)
        _, charges = await _get(http, f"{url}/v1/budgets/words/charges?limit=1", token)
        for path in (f"/v1/budgets/words/charges?after={queries['next']}", f"/v1/queries?after={charges['next']}",
                     f"/v1/budgets/app.theme/charges?after={charges['next']}", f"/v1/budgets?after={queries['next']}"):
            status, body = await _get(http, url + path, token)
            assert status == 400 and body["error"].startswith("after:"), (path, body)
        for key in (["queries", 2**61, "x"], ["queries", True, "x"], ["queries", 5, 7], ["charges", "words", -1],
                    ["charges", "words", 2**70], ["budgets"]):  # shaped like cursors, with keys no row has
            path = "/v1/budgets/words/charges" if key[0] == "charges" else f"/v1/{key[0]}"
            status, body = await _get(http, f"{url}{path}?after={_cursor(key)}", token)
            assert status == 400 and body["detail"][0]["field"] == "after", (key, body)


def _cursor(key: list[Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(key).encode()).rstrip(b"=").decode()


async def _audit(url: str, token: str) -> AuditReport:
    return await asyncio.to_thread(lambda: audit_log(url, token=token))


async def test_fa_audit_with_a_token_compares_every_query_and_charge(history: Json,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    url, token, store = history["url"], history["tokens"]["analyst"], history["store"]
    report = await _audit(url, token)
    assert report.ok, report.findings[:5]
    assert (report.queries_checked, report.charges_checked) == (N, N + OTHERS)
    assert report.entries == 2 * (N + OTHERS) + 1  # and the default budget, logged at start-up

    # the 4,500th query: its spec and its charge as the server shows them now differ from what it logged
    qid = _newest_first(history["created"])[TAMPERED - 1]
    position = history["created"].index(qid)
    assert _created(position) == T0 and position < N - 1000  # in the tie; its charge not among the newest 1,000
    async with store.db.tx() as s:
        await s.execute(update(Query).where(Query.id == qid).values(spec={"kind": "histogram", "source": "words",
                                                                           "name": "rewritten", "params": {}}))
        await s.execute(update(PrivacyCharge).where(PrivacyCharge.query_id == qid).values(epsilon=EPSILON / 2))
    report = await _audit(url, token)
    query_index, charge_index = 1 + 2 * position, 2 + 2 * position  # after the default budget: (query, charge) pairs
    assert [(f.code, f.index) for f in report.findings] == [("query_mismatch", query_index),
                                                             ("ledger_mismatch", charge_index),
                                                             ("spend_mismatch", None)], report.findings
    assert qid in report.findings[0].message and "spec" in report.findings[0].message
    assert qid in report.findings[1].message

    code = await asyncio.to_thread(analyst_cli.main, ["--server", url, "--token", token, "audit", "--json"])
    printed = json.loads(capsys.readouterr().out)
    assert code == 1
    assert [f["code"] for f in printed["findings"]] == ["query_mismatch", "ledger_mismatch", "spend_mismatch"]
    assert printed["queries_checked"] == N
