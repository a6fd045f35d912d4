"""`fa audit` and `fa witness` against a fake log server: an in-memory log (translog) behind the documented
`/v1/log/*` routes and, for the audits with a token, the analyst routes the audit reads (`/v1/whoami`,
`/v1/queries…`, `/v1/budgets…`), all derived from one list of honest "transactions" the way the server records
them (one signed head per appending transaction).

An honest log passes, with and without a token. Each cheat is named: an altered entry, a charge over the
budget, a release of an unlogged query, a log rewritten since the state file's head, two heads of one size, a
query run without an entry, a result or a ledger row that differs from the log. The witness cosigns heads that
extend its state and refuses (exit 2, both heads printed) a fork."""

from __future__ import annotations

import asyncio
import base64
import copy
import dataclasses
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from analyst_client import cli as analyst_cli
from analyst_client.audit import CODES, AuditReport, audit_log, read_state
from analyst_client.witness import init_key, read_key, witness_once
from tests.support.translog_cases import TASK_SECAGG
from translog import entries as te
from translog.heads import Signer, TreeHead, key_table, verify_cosignature
from translog.merkle import MerkleTree
from tests.support.toolchain import require
from translog.wire import CosignatureModel, CosignRequest, HeadModel, b64

Json = dict[str, Any]
ORIGIN = "test.example/fa-log"
LOG_SEED = hashlib.sha256(b"test-audit/log").digest()
WITNESS_SEED = hashlib.sha256(b"test-audit/witness").digest()
T0 = 1_764_300_000_000
TOKEN = "analyst-token"
SPEC = {"kind": "histogram", "name": "theme", "source": "app.theme", "params": {"buckets": ["dark", "light"]}}
RESULT = {"counts": {"dark": 16.5, "light": 2}, "note": "é ✓", "n": [1, 2.5, -0.0]}


def spec_of(source: str, name: str) -> Json:
    return {**SPEC, "source": source, "name": name}


def honest_transactions() -> list[list[Json]]:
    """What an honest server appends, one list per transaction."""
    at = iter(range(T0, T0 + 1000))
    return [
        [te.budget_entry(te.DEFAULT_SOURCE, 10.0, 1e-5, next(at))],
        [te.budget_entry("app.theme", 3.0, 1e-6, next(at))],
        [te.query_entry("q-1", "app.theme", "histogram", spec_of("app.theme", "one"), next(at)),
         te.charge_entry("q-1", "app.theme", 1.0, 1e-7, next(at))],
        [te.task_entry("q-1", 0, "c" * 32, hashlib.sha256(b"task q-1").digest(), next(at), TASK_SECAGG)],
        [te.release_entry("q-1", "succeeded", RESULT, {"epsilon": 1.0, "delta": 1e-7}, next(at))],
        [te.query_entry("q-2", "app.theme", "histogram", spec_of("app.theme", "two"), next(at)),
         te.charge_entry("q-2", "app.theme", 0.5, 1e-7, next(at))],
        [te.charge_entry("q-2", "app.theme", 0.5, 1e-7, next(at), refund=True)],
        [te.query_entry("q-3", "words", "histogram", spec_of("words", "three"), next(at)),
         te.charge_entry("q-3", "words", 2.0, 1e-7, next(at))],
        [te.query_entry("q-4", "words", "histogram", spec_of("words", "four"), next(at))],
        [te.release_entry("q-4", "succeeded", {"counts": {"dark": 3, "light": 4}}, None, next(at))],
    ]


class FakeLog:
    """The log's routes over an in-memory list of entries and one signed head per transaction; `served_entries`,
    `head_override` and `views` let a test make it lie."""

    def __init__(self, transactions: list[list[Json]], seed: bytes = LOG_SEED) -> None:
        self.signer = Signer(seed)
        self.witness_keys = key_table([Signer(WITNESS_SEED).public_key])
        self.entries: list[Json] = []
        self.heads: dict[int, HeadModel] = {}
        self.cosignatures: dict[int, list[CosignatureModel]] = {}
        self.head_override: HeadModel | None = None
        self.served_entries: list[Json] | None = None
        self.views: Json = {}
        for tx in transactions:
            self.append(tx)

    def append(self, tx: list[Json]) -> None:
        self.entries += copy.deepcopy(tx)
        size = len(self.entries)
        tree = MerkleTree(te.entry_leaf_hash(e) for e in self.entries)
        head = TreeHead(ORIGIN, size, tree.root(), T0 + 10_000 + size)
        self.heads[size] = HeadModel.of(self.signer.sign_head(head))

    def newest(self) -> HeadModel:
        return self.head_override or self.heads[max(self.heads)]

    # -- routes -------------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application()
        r = app.router
        r.add_get("/v1/log/key", self.key)
        r.add_get("/v1/log/head", self.head)
        r.add_get("/v1/log/heads", self.list_heads)
        r.add_get("/v1/log/entries", self.list_entries)
        r.add_get("/v1/log/proof/consistency", self.consistency)
        r.add_post("/v1/log/cosignatures", self.cosign)
        r.add_get("/v1/whoami", self.analyst(lambda _: {"token_id": 1, "role": "analyst"}))
        r.add_get("/v1/queries", self.analyst(lambda _: {"queries": self.views["queries"]}))
        r.add_get("/v1/queries/{id}", self.analyst(lambda req: self.views["status"][req.match_info["id"]]))
        r.add_get("/v1/queries/{id}/result", self.analyst(lambda req: self.views["results"][req.match_info["id"]]))
        r.add_get("/v1/budgets", self.analyst(lambda _: self.views["budgets"]))
        r.add_get("/v1/budgets/{source}/charges",
                  self.analyst(lambda req: self.views["charges"][req.match_info["source"]]))
        return app

    @staticmethod
    def analyst(answer: Any) -> Any:
        async def handler(request: web.Request) -> web.Response:
            if request.headers.get("Authorization") != f"Bearer {TOKEN}":
                return web.json_response({"error": "unknown or revoked token"}, status=401)
            try:
                return web.json_response(answer(request))
            except KeyError:
                return web.json_response({"error": "no such thing"}, status=404)
        return handler

    async def key(self, request: web.Request) -> web.Response:
        assert "Authorization" not in request.headers  # the public routes get no token
        return web.json_response({"origin": ORIGIN, "public_key": b64(self.signer.public_key),
                                  "key_id": self.signer.key_id, "previous_keys": [],
                                  "witnesses": {k: b64(v) for k, v in self.witness_keys.items()}})

    async def head(self, request: web.Request) -> web.Response:
        if not self.heads:
            return web.json_response({"error": "the log is empty"}, status=404)
        h = self.newest()
        return web.json_response({"head": h.model_dump(),
                                  "cosignatures": [c.model_dump() for c in self.cosignatures.get(h.size, [])]})

    @staticmethod
    def _range(request: web.Request) -> tuple[int, int]:
        start = int(request.query.get("start", 0))
        end = int(request.query.get("end", start + 1000))
        assert 0 <= end - start <= 1000, (start, end)
        return start, end

    async def list_heads(self, request: web.Request) -> web.Response:
        start, end = self._range(request)
        return web.json_response({"heads": [h.model_dump() for s, h in sorted(self.heads.items()) if start <= s < end]})

    async def list_entries(self, request: web.Request) -> web.Response:
        start, end = self._range(request)
        entries = self.served_entries if self.served_entries is not None else self.entries
        return web.json_response({"size": len(entries), "entries": [
            {"index": i, "entry": e} for i, e in enumerate(entries) if start <= i < end]})

    async def consistency(self, request: web.Request) -> web.Response:
        first, second = int(request.query["first"]), int(request.query["second"])
        tree = MerkleTree(te.entry_leaf_hash(e) for e in self.entries)
        if second > tree.size:
            return web.json_response({"error": f"size: the log has {tree.size} entries"}, status=404)
        return web.json_response({"proof": [b64(h) for h in tree.consistency_proof(first, second)]})

    async def cosign(self, request: web.Request) -> web.Response:
        req = CosignRequest.model_validate(await request.json())
        if req.key_id not in self.witness_keys:
            return web.json_response({"error": "key_id: not a witness"}, status=403)
        head = self.heads[req.size].parse().head
        verify_cosignature(req.parse(), head, self.witness_keys)
        self.cosignatures.setdefault(req.size, []).append(CosignatureModel.model_validate(req.model_dump()))
        return web.json_response({"stored": True, "size": req.size})

    # -- what an honest server shows an analyst -------------------------------------------------

    def honest_views(self) -> None:
        queries: dict[str, Json] = {}
        results: dict[str, Json] = {}
        budgets: dict[str, tuple[float, float]] = {}
        rows: dict[str, list[Json]] = {}
        for e in self.entries:
            t = e["type"]
            if t == "query":
                queries[e["query_id"]] = {"id": e["query_id"], "kind": e["kind"], "source": e["source"],
                                          "name": e["spec"]["name"], "status": "running",
                                          "created_at": "2025-11-28T03:20:00", "spec": e["spec"]}
            elif t == "budget":
                budgets[e["source"]] = (e["total_epsilon"], e["total_delta"])
            elif t == "charge":
                rows.setdefault(e["source"], []).append(
                    {"query_id": e["query_id"], "kind": "histogram", "name": None, "epsilon": e["epsilon"],
                     "delta": e["delta"], "status": "charged", "charged_at": "2025-11-28T03:20:00",
                     "refunded_at": None, "own": True})
            elif t == "refund":
                for row in rows[e["source"]]:
                    if row["query_id"] == e["query_id"]:
                        row["status"], row["refunded_at"] = "refunded", "2025-11-28T03:21:00"
            elif t == "release":
                queries[e["query_id"]]["status"] = e["status"]
                result = RESULT if e["query_id"] == "q-1" else {"counts": {"dark": 3, "light": 4}}
                results[e["query_id"]] = {"id": e["query_id"], "kind": "histogram", "status": e["status"],
                                          "result": json.loads(json.dumps(result)), "privacy": {}, "table": []}
        default = budgets[te.DEFAULT_SOURCE]
        views = []
        charges = {}
        for source in sorted(set(rows) | {s for s in budgets if s != te.DEFAULT_SOURCE}):
            total = budgets.get(source, default)
            kept = [r for r in rows.get(source, []) if r["status"] == "charged"]
            spent = (sum(r["epsilon"] for r in kept), sum(r["delta"] for r in kept))
            view = {"source": source, "total_epsilon": total[0], "total_delta": total[1], "spent_epsilon": spent[0],
                    "spent_delta": spent[1], "remaining_epsilon": max(0.0, total[0] - spent[0]),
                    "remaining_delta": max(0.0, total[1] - spent[1]), "queries_charged": len(kept),
                    "configured": source in budgets}
            views.append(view)
            charges[source] = {"source": source, "budget": view, "charges": rows.get(source, [])}
        listed = [{k: v for k, v in q.items() if k != "spec"} | {"spec": None} for q in reversed(queries.values())]
        self.views = json.loads(json.dumps({"queries": listed, "status": {q["id"]: q for q in queries.values()}, "results": results,
                      "budgets": {"budgets": views, "default_epsilon": default[0], "default_delta": default[1]},
                      "charges": charges}))


@pytest.fixture
def fake() -> Iterator[FakeLog]:
    log = FakeLog(honest_transactions())
    log.honest_views()
    yield log


async def serve(log: FakeLog) -> TestServer:
    server = TestServer(log.app())
    await server.start_server()
    return server


async def audit(server: TestServer, **kw: Any) -> AuditReport:
    url = str(server.make_url("")).rstrip("/")
    return await asyncio.to_thread(lambda: audit_log(url, **kw))


def codes(report: AuditReport) -> list[str]:
    return [f.code for f in report.findings]


def index_of(log: FakeLog, type_: str, query_id: str) -> int:
    return next(i for i, e in enumerate(log.entries) if e["type"] == type_ and e.get("query_id") == query_id)


# -- honest logs -------------------------------------------------------------------------------------------


async def test_an_honest_log_passes_and_its_head_is_saved(fake: FakeLog, tmp_path: Path) -> None:
    server = await serve(fake)
    try:
        state = tmp_path / "audit.json"
        report = await audit(server, state=state)
        assert report.ok, report.findings
        assert report.head is not None and report.head.size == len(fake.entries) == report.entries
        assert report.entries_by_type == {"query": 4, "task": 1, "charge": 3, "refund": 1, "budget": 2, "release": 2}
        assert report.heads_checked == len(fake.heads) and not report.key_pinned
        spend = {s.source: s for s in report.sources}
        assert (spend["app.theme"].spent_epsilon, spend["app.theme"].total_epsilon) == (1.0, 3.0)
        assert (spend["app.theme"].charges, spend["app.theme"].refunds, spend["app.theme"].budget_from) == (2, 1, "app.theme")
        assert (spend["words"].spent_epsilon, spend["words"].total_epsilon, spend["words"].budget_from) == (2.0, 10.0, "*")
        saved = read_state(state)
        assert saved is not None and saved["head"] == fake.newest().model_dump() and report.state_saved

        # the log grows; the next audit checks it extends the saved head, with the key pinned
        fake.append([te.query_entry("q-5", "words", "histogram", spec_of("words", "five"), T0 + 500),
                     te.charge_entry("q-5", "words", 1.0, 1e-7, T0 + 500)])
        fake.honest_views()
        report = await audit(server, state=state, log_keys=[fake.signer.public_key], token=TOKEN)
        assert report.ok, report.findings
        assert report.key_pinned and report.state_size == 13 and report.with_token
        assert (report.queries_checked, report.results_checked, report.charges_checked) == (5, 2, 4)
        assert read_state(state)["head"]["size"] == 15  # type: ignore[index]
    finally:
        await server.close()


async def test_an_empty_log_passes(tmp_path: Path) -> None:
    server = await serve(FakeLog([]))
    try:
        report = await audit(server, state=tmp_path / "s.json")
        assert report.ok and report.head is None and report.entries == 0
        assert not (tmp_path / "s.json").exists()
    finally:
        await server.close()


# -- a cheating log ----------------------------------------------------------------------------------------


async def test_an_altered_entry_is_named(fake: FakeLog) -> None:
    release = index_of(fake, "release", "q-1")
    fake.served_entries = copy.deepcopy(fake.entries)
    fake.served_entries[release]["result_digest"] = "0" * 64
    server = await serve(fake)
    try:
        report = await audit(server)
        assert codes(report) == ["altered"]
        f = report.findings[0]
        assert f.index == release and f.message.startswith(f"entry {release} altered or removed")
        assert "later head(s) do not match" in f.message

        # a lowered charge in a two-entry transaction: the pair is named
        charge = index_of(fake, "charge", "q-3")
        fake.served_entries = copy.deepcopy(fake.entries)
        fake.served_entries[charge]["epsilon"] = 0.1
        report = await audit(server)
        assert codes(report) == ["altered"] and report.findings[0].index == charge
        assert f"among {charge - 1}..{charge}" in report.findings[0].message

        # entries removed from the end
        fake.served_entries = fake.entries[:-2]
        report = await audit(server)
        assert "entries_missing" in codes(report)
    finally:
        await server.close()


async def test_a_charge_over_the_budget_is_named() -> None:
    txs = honest_transactions()
    over = [te.query_entry("q-9", "app.theme", "histogram", spec_of("app.theme", "nine"), T0 + 900),
            te.charge_entry("q-9", "app.theme", 2.5, 1e-7, T0 + 900)]
    log = FakeLog(txs + [over])
    server = await serve(log)
    try:
        report = await audit(server)
        assert codes(report) == ["over_budget"]
        f = report.findings[0]
        assert f.index == len(log.entries) - 1 and "q-9" in f.message and "app.theme" in f.message
        assert {s.source: s.over for s in report.sources} == {"app.theme": True, "words": False}
    finally:
        await server.close()


async def test_a_release_of_an_unlogged_query_and_entry_order_faults_are_named() -> None:
    txs = honest_transactions() + [
        [te.release_entry("q-ghost", "succeeded", {"x": 1}, None, T0 + 900)],
        [te.charge_entry("q-4", "words", 0.1, 0.0, T0 + 901, refund=True)],
        [te.charge_entry("q-4", "app.theme", 0.1, 0.0, T0 + 902)],
    ]
    log = FakeLog(txs)
    server = await serve(log)
    try:
        report = await audit(server)
        n = len(log.entries)
        assert [(f.code, f.index) for f in report.findings] == [
            ("unlogged_query", n - 3), ("refund_without_charge", n - 2), ("charge_source", n - 1)]
        assert "q-ghost" in report.findings[0].message
    finally:
        await server.close()


@pytest.mark.parametrize(("secagg", "why"), [
    ({**TASK_SECAGG, "threat_model": "semi_honest"}, "not active"),
    ({**TASK_SECAGG, "threshold": 40}, "threshold: 40 of a neighbourhood of 60"),
    ({"n": 1000, "degree": 2, "threshold": 2, "threat_model": "active", "graph_seed": "members_root/v1"}, "degree: 2"),
    ({**TASK_SECAGG, "graph_seed": "session_id"}, "graph seed"),
    ({**TASK_SECAGG, "degree": "59"}, "not all integers"),
])
async def test_a_cohort_below_the_safety_floor_is_named(secagg: dict[str, Any], why: str) -> None:
    """`fa audit` recomputes the floor a device would (secagg.floor, default assumptions) for every logged cohort: a
    server that logs the parameters it used cannot hide a cohort its devices should have refused."""
    unsafe = te.task_entry("q-1", 0, "d" * 32, hashlib.sha256(b"unsafe").digest(), T0 + 900, secagg)
    log = FakeLog(honest_transactions() + [[unsafe]])
    server = await serve(log)
    try:
        report = await audit(server)
        assert [(f.code, f.index) for f in report.findings] == [("below_floor", len(log.entries) - 1)]
        assert why in report.findings[0].message
    finally:
        await server.close()


async def test_a_second_task_for_one_cohort_is_a_conflict() -> None:
    """A server that logs two tasks for one cohort (to show its members different ones, each finding its own
    digest in the log) is caught by the audit; the task binding makes those members refuse anyway."""
    decoy = te.task_entry("q-1", 0, "c" * 32, hashlib.sha256(b"decoy").digest(), T0 + 900, TASK_SECAGG)
    log = FakeLog(honest_transactions() + [[decoy]])
    server = await serve(log)
    try:
        report = await audit(server)
        assert [(f.code, f.index) for f in report.findings] == [("task_conflict", len(log.entries) - 1)]
        assert "c" * 32 in report.findings[0].message
    finally:
        await server.close()


def _runs(*extra: Json) -> FakeLog:
    """The honest log plus charges for further runs of q-1 (app.theme, 1.0/1e-7, its cohort "c"×32)."""
    return FakeLog(honest_transactions() + [[e] for e in extra])


def _run(layer: int, epsilon: float = 1.0, cohort: str = "c" * 32, query: str = "q-1") -> Json:
    return te.charge_entry(query, "app.theme", epsilon, 1e-7, T0 + 900 + layer, layer=layer, cohort_id=cohort)


async def test_charges_for_further_runs_follow_the_first_in_order() -> None:
    """A failed opening's devices contributed again: the query is charged a second run, logged as such — clean, and
    the source's spend counts it; a run out of order, of other amounts, naming no logged cohort, or of a query
    never charged is named."""
    server = await serve(_runs(_run(2)))
    try:
        report = await audit(server)
        assert report.ok, report.findings
        spend = {s.source: s for s in report.sources}["app.theme"]
        assert spend.spent_epsilon == pytest.approx(2.0) and spend.charges == 2  # q-1 twice; q-2 refunded
    finally:
        await server.close()
    base = len(FakeLog(honest_transactions()).entries)
    for extra, index in [((_run(3),), base), ((_run(2, epsilon=0.2),), base), ((_run(2, cohort="d" * 32),), base),
                         ((_run(2), _run(2)), base + 1), ((_run(2, query="q-4"),), base)]:
        server = await serve(_runs(*extra))
        try:
            report = await audit(server)
            assert [(f.code, f.index) for f in report.findings] == [("run_unexplained", index)], extra
        finally:
            await server.close()
    server = await serve(_runs(_run(2), _run(3, epsilon=1.0), _run(4)))  # 4 runs of 1.0 on a 3.0 budget
    try:
        assert codes(await audit(server)) == ["over_budget"]
    finally:
        await server.close()


async def test_no_budget_logged_is_a_finding() -> None:
    txs = [tx for tx in honest_transactions() if tx[0]["type"] != "budget"]
    server = await serve(FakeLog(txs))
    try:
        report = await audit(server)
        assert codes(report) == ["no_budget", "no_budget"]  # once per source
        assert {s.source: s.budget_from for s in report.sources} == {"app.theme": None, "words": None}
    finally:
        await server.close()


async def test_a_state_head_from_a_forked_log_is_a_rewrite(fake: FakeLog, tmp_path: Path) -> None:
    state = tmp_path / "audit.json"
    server = await serve(fake)
    try:
        assert (await audit(server, state=state)).ok
    finally:
        await server.close()
    # the same key re-signs a log whose charge of q-1 is lower, and that is longer than the audited one
    txs = honest_transactions()
    txs[2][1]["epsilon"] = 0.25
    forked = FakeLog(txs + [[te.query_entry("q-5", "words", "histogram", spec_of("words", "five"), T0 + 900)]])
    server = await serve(forked)
    try:
        before = state.read_text()
        report = await audit(server, state=state)
        assert set(codes(report)) == {"rewritten", "consistency"}
        assert "rewritten since the last audit" in report.findings[0].message
        assert state.read_text() == before  # not overwritten
        # a log that shrank below the audited head
        server = await _swap(server, FakeLog(honest_transactions()[:4]))
        report = await audit(server, state=state)
        assert codes(report) == ["rewritten"]
    finally:
        await server.close()


async def _swap(old: TestServer, log: FakeLog) -> TestServer:
    await old.close()
    return await serve(log)


async def test_equivocating_heads_and_foreign_signatures_are_found(fake: FakeLog) -> None:
    n = len(fake.entries)
    other = TreeHead(ORIGIN, n, hashlib.sha256(b"another tree").digest(), T0 + 99_999)
    fake.head_override = HeadModel.of(fake.signer.sign_head(other))
    server = await serve(fake)
    try:
        report = await audit(server)
        assert codes(report) == ["equivocation"]  # the entries match the stored head: no entry is named altered
        assert any(f.code == "equivocation" and f"size {n}" in f.message for f in report.findings)
        # heads under a key that is not pinned
        report = await audit(server, log_keys=[Signer(b"\x01" * 32).public_key])
        assert "key_not_pinned" in codes(report) and "bad_signature" in codes(report)
    finally:
        await server.close()


# -- what the server reports, against its log -------------------------------------------------------------


async def test_with_a_token_the_servers_views_are_checked_against_the_log(fake: FakeLog) -> None:
    server = await serve(fake)
    try:
        assert (await audit(server, token=TOKEN)).ok

        fake.views["queries"].append({"id": "q-off", "kind": "histogram", "source": "words", "status": "running",
                                      "created_at": "2025-11-28T04:00:00"})
        fake.views["status"]["q-off"] = {"id": "q-off", "spec": spec_of("words", "off")}
        report = await audit(server, token=TOKEN)
        assert codes(report) == ["query_unlogged"] and "q-off ran without a log entry" in report.findings[0].message

        fake.honest_views()
        fake.views["results"]["q-1"]["result"]["counts"]["dark"] = 17
        report = await audit(server, token=TOKEN)
        assert [(f.code, f.index) for f in report.findings] == [("result_digest", index_of(fake, "release", "q-1"))]

        fake.honest_views()
        fake.views["status"]["q-3"]["spec"]["params"]["buckets"] = ["dark"]
        report = await audit(server, token=TOKEN)
        assert [(f.code, f.index) for f in report.findings] == [("query_mismatch", index_of(fake, "query", "q-3"))]

        fake.honest_views()
        words = fake.views["charges"]["words"]["charges"]
        words[0]["epsilon"] = 0.5  # the ledger undercharges q-3
        fake.views["budgets"]["budgets"][1]["spent_epsilon"] = 0.5
        report = await audit(server, token=TOKEN)
        assert [(f.code, f.index) for f in report.findings] == [
            ("ledger_mismatch", index_of(fake, "charge", "q-3")), ("spend_mismatch", None)]
        assert "q-3" in report.findings[0].message

        fake.honest_views()
        fake.views["charges"]["app.theme"]["charges"][1]["status"] = "charged"  # the refund of q-2 undone
        report = await audit(server, token=TOKEN)
        assert [(f.code, f.index) for f in report.findings] == [("ledger_mismatch", index_of(fake, "refund", "q-2"))]

        fake.honest_views()
        del fake.views["charges"]["words"]["charges"][0]
        report = await audit(server, token=TOKEN)
        assert ("ledger_missing", index_of(fake, "charge", "q-3")) in [(f.code, f.index) for f in report.findings]

        fake.honest_views()
        fake.views["budgets"]["budgets"][0]["total_epsilon"] = 30.0
        report = await audit(server, token=TOKEN)
        assert codes(report) == ["budget_mismatch"] and "app.theme" in report.findings[0].message
    finally:
        await server.close()


def test_every_finding_code_is_documented() -> None:
    source = (Path(__file__).resolve().parents[2] / "analyst_client" / "audit.py").read_text()
    import re

    used = set(re.findall(r'find\("(\w+)"', source))
    assert used <= set(CODES), used - set(CODES)


# -- the CLI -----------------------------------------------------------------------------------------------


async def test_fa_audit_prints_a_summary_and_exits_1_on_a_finding(fake: FakeLog, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    server = await serve(fake)
    url = str(server.make_url("")).rstrip("/")
    try:
        key = b64(fake.signer.public_key)
        code = await asyncio.to_thread(analyst_cli.main, ["--server", url, "audit", "--state", str(tmp_path / "s.json"),
                                                          "--log-key", key])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert f"size {len(fake.entries)}" in out and "(pinned)" in out and "findings   none" in out
        assert "app.theme" in out and "no token" in err

        code = await asyncio.to_thread(analyst_cli.main, ["--server", url, "--token", TOKEN, "audit", "--json"])
        out, err = capsys.readouterr()
        data = json.loads(out)
        assert code == 0 and data["ok"] and data["with_token"] and data["key_pinned"] is False

        fake.served_entries = copy.deepcopy(fake.entries)
        fake.served_entries[4]["round"] = 7  # the task entry, a transaction of its own
        code = await asyncio.to_thread(analyst_cli.main, ["--server", url, "audit"])
        out, err = capsys.readouterr()
        assert code == 1 and "[altered] entry 4: entry 4 altered or removed" in out and "1 finding(s)" in err

        code = await asyncio.to_thread(analyst_cli.main, ["--server", url, "audit", "--log-key", "not base64!"])
        assert code == 2
    finally:
        await server.close()
    code = await asyncio.to_thread(analyst_cli.main, ["--server", url, "--timeout", "2", "audit"])
    out, err = capsys.readouterr()
    assert code == 1 and f"cannot reach {url}" in err


# -- the witness -------------------------------------------------------------------------------------------


async def test_the_witness_cosigns_heads_that_extend_its_state_and_refuses_a_fork(
    fake: FakeLog, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key_file, state = tmp_path / "witness.key", tmp_path / "witness.json"
    key_file.write_text(base64.b64encode(WITNESS_SEED).decode() + "\n")
    server = await serve(fake)
    url = str(server.make_url("")).rstrip("/")
    try:
        res = await asyncio.to_thread(witness_once, url, seed=read_key(key_file), state=state, name="w1")
        n = len(fake.entries)
        assert res.status == "cosigned" and res.head["size"] == n and res.stored is True
        cos = fake.cosignatures[n][0]
        verify_cosignature(cos.parse(), fake.heads[n].parse().head, fake.witness_keys)
        assert cos.witness == "w1"
        saved = read_state(state)
        assert saved is not None and saved["log_keys"] == [b64(fake.signer.public_key)]  # pinned on first use

        fake.append([te.query_entry("q-5", "words", "histogram", spec_of("words", "five"), T0 + 900)])
        code = await asyncio.to_thread(analyst_cli.main, ["--server", url, "witness", "--key", str(key_file),
                                                          "--state", str(state), "--once"])
        out, err = capsys.readouterr()
        assert code == 0 and f"cosigned the head of size {n + 1}" in err
        assert len(fake.cosignatures[n + 1]) == 1
    finally:
        await server.close()

    # a fork of the cosigned log, signed by the same key and longer
    txs = honest_transactions()
    txs[4][0]["status"] = "failed"
    forked = FakeLog(txs + [[te.query_entry("q-6", "words", "histogram", spec_of("words", "six"), T0 + 900)]] * 2)
    server = await serve(forked)
    url = str(server.make_url("")).rstrip("/")
    try:
        before = state.read_text()
        code = await asyncio.to_thread(analyst_cli.main, ["--server", url, "witness", "--key", str(key_file),
                                                          "--state", str(state)])
        out, err = capsys.readouterr()
        assert code == 2, err
        proof = json.loads(out)
        assert proof["cosigned"]["size"] == n + 1 and proof["served"]["size"] == len(forked.entries)
        assert "does not extend" in proof["error"] and "NOT cosigning" in err
        assert not forked.cosignatures and state.read_text() == before

        # the same size with another root: equivocation
        forked2 = FakeLog(honest_transactions() + [[te.query_entry("q-7", "words", "histogram",
                                                                   spec_of("words", "seven"), T0 + 900)]])
        server = await _swap(server, forked2)
        url = str(server.make_url("")).rstrip("/")
        res = await asyncio.to_thread(witness_once, url, seed=WITNESS_SEED, state=state)
        assert res.status == "inconsistent" and "equivocation" in res.message and not forked2.cosignatures
    finally:
        await server.close()


async def test_the_witness_refuses_a_head_under_another_key(fake: FakeLog, tmp_path: Path) -> None:
    from analyst_client.witness import WitnessError

    server = await serve(fake)
    url = str(server.make_url("")).rstrip("/")
    try:
        with pytest.raises(WitnessError, match="does not verify"):
            await asyncio.to_thread(witness_once, url, seed=WITNESS_SEED, state=tmp_path / "s.json",
                                    log_keys=[Signer(b"\x02" * 32).public_key])
        assert not fake.cosignatures and not (tmp_path / "s.json").exists()
    finally:
        await server.close()


def test_fa_witness_init_key_writes_a_fresh_key_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key_file = tmp_path / "w.key"
    assert analyst_cli.main(["witness", "--key", str(key_file), "--init-key"]) == 0
    out, err = capsys.readouterr()
    seed = read_key(key_file)
    assert out.strip() == b64(Signer(seed).public_key) and "FA_LOG_WITNESS_KEYS" in err
    assert key_file.stat().st_mode & 0o077 == 0
    assert analyst_cli.main(["witness", "--key", str(key_file), "--init-key"]) == 1  # never overwritten
    assert read_key(key_file) == seed
    assert init_key(tmp_path / "other.key").public_key != Signer(seed).public_key


# -- the console's audit (vendor/translog.js, built from device_sdk/js/src/logAudit.ts) agrees with fa audit -----------

NODE_AUDIT = r"""
import { auditLog } from "%s";
const base = process.argv[1];
async function get(path) {
  const r = await fetch(base + path);
  const data = await r.json();
  if (!r.ok) { const e = new Error(data.error); e.status = r.status; throw e; }
  return data;
}
const report = await auditLog(get);
console.log(JSON.stringify(report));
"""


def _console_cases() -> list[tuple[str, FakeLog]]:
    altered = FakeLog(honest_transactions())
    altered.served_entries = copy.deepcopy(altered.entries)
    altered.served_entries[4]["round"] = 3
    over = FakeLog(honest_transactions() + [[
        te.query_entry("q-9", "app.theme", "histogram", spec_of("app.theme", "nine"), T0 + 900),
        te.charge_entry("q-9", "app.theme", 2.5, 1e-7, T0 + 900)]])
    ghost = FakeLog(honest_transactions() + [[te.release_entry("q-ghost", "succeeded", {"x": 1}, None, T0 + 900)],
                                             [te.charge_entry("q-4", "words", 0.1, 0.0, T0 + 901, refund=True)]])
    equivocating = FakeLog(honest_transactions())
    size = len(equivocating.entries)
    equivocating.head_override = HeadModel.of(equivocating.signer.sign_head(
        TreeHead(ORIGIN, size, hashlib.sha256(b"other").digest(), T0)))
    bad_spec = FakeLog(honest_transactions())
    bad_spec.entries[2]["spec_digest"] = "0" * 64
    bad_spec = FakeLog([[e] for e in bad_spec.entries])
    two_tasks = FakeLog(honest_transactions() + [[te.task_entry("q-1", 0, "c" * 32, bytes(32), T0 + 900, TASK_SECAGG)]])
    return [("honest", FakeLog(honest_transactions())), ("altered", altered), ("over", over), ("ghost", ghost),
            ("two_tasks", two_tasks), ("runs", _runs(_run(2))), ("bad_runs", _runs(_run(3), _run(2, cohort="d" * 32))),
            ("equivocating", equivocating), ("bad_spec", bad_spec), ("empty", FakeLog([]))]


@pytest.mark.parametrize("name", [name for name, _ in _console_cases()])
async def test_the_consoles_audit_agrees_with_fa_audit(name: str) -> None:
    import shutil

    node = shutil.which("node")
    require(None if node else "node not found (scripts/install_node.sh installs it)", "Node.js for the console's audit module")
    assert node is not None
    log = dict(_console_cases())[name]
    module = (Path(__file__).resolve().parents[2] / "analytics_server" / "console" / "vendor" / "translog.js").as_uri()
    server = await serve(log)
    url = str(server.make_url("")).rstrip("/")
    try:
        expected = await audit(server)
        proc = await asyncio.create_subprocess_exec(
            node, "--input-type=module", "-e", NODE_AUDIT % module, url,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    finally:
        await server.close()
    assert proc.returncode == 0, err.decode()[-2000:]
    got = json.loads(out)
    assert got["checked"] == {"roots": True, "signatures": True}
    assert [(f["code"], f["index"]) for f in got["findings"]] == [(f.code, f.index) for f in expected.findings]
    assert [f["message"].split(":")[0] for f in got["findings"] if f["code"] == "altered"] == [
        f.message.split(":")[0] for f in expected.findings if f.code == "altered"]
    assert got["entries"] == expected.entries and got["byType"] == expected.entries_by_type
    assert got["sources"] == [dataclasses.asdict(s) for s in expected.sources]
    if expected.head is not None:
        assert got["head"]["size"] == expected.head.size and got["head"]["root"] == expected.head.root


# -- the console's page ------------------------------------------------------------------------------------


async def test_the_consoles_log_page_shows_the_head_and_the_audit(tmp_path: Path) -> None:
    from devstack.browser import chromium_available, console_page

    require(chromium_available(), "Chromium for the console's log page (make chromium)")
    from analytics_server.http.console import ASSETS, load_assets
    from analytics_server.http.console import routes as console_routes

    log = FakeLog(honest_transactions())
    log.honest_views()
    app = log.app()
    app[ASSETS] = load_assets()
    app.add_routes(console_routes)
    server = TestServer(app)
    await server.start_server()
    url = str(server.make_url("")).rstrip("/")

    def browse() -> list[Json]:
        seen = []
        with console_page(url, TOKEN) as s:
            for step in ("honest", "over budget"):
                if step == "over budget":
                    log.append([te.query_entry("q-9", "app.theme", "histogram", spec_of("app.theme", "nine"), T0 + 900),
                                te.charge_entry("q-9", "app.theme", 2.5, 1e-7, T0 + 900)])
                    s.page.click("[data-testid=log-rerun]")
                    s.page.wait_for_selector("[data-testid=log-head][data-size='15']")  # head and audit: one render
                else:
                    s.goto("#/log")
                page = s.page
                seen.append({
                    "size": page.get_attribute("[data-testid=log-head]", "data-size"),
                    "root": page.inner_text("[data-testid=log-root]"),
                    "findings": page.get_attribute("[data-testid=log-verdict]", "data-findings"),
                    "types": {r.get_attribute("data-type"): r.get_attribute("data-count")
                              for r in page.query_selector_all("[data-testid=log-types] tbody tr")},
                    "sources": {r.get_attribute("data-source"): (r.get_attribute("data-spent"), r.get_attribute("data-total"))
                                for r in page.query_selector_all("[data-testid=log-sources] tbody tr")},
                    "codes": [(r.get_attribute("data-code"), r.get_attribute("data-index"))
                              for r in page.query_selector_all("[data-testid=log-findings] tbody tr")],
                    "text": page.inner_text("main"),
                })
            assert not s.problems, s.problems
        return seen

    try:
        honest, over = await asyncio.to_thread(browse)
    finally:
        await server.close()
    assert honest["size"] == "13" and honest["root"] == log.heads[13].root and honest["findings"] == "0"
    assert honest["types"] == {"query": "4", "task": "1", "charge": "3", "refund": "1", "budget": "2", "release": "2"}
    assert honest["sources"] == {"app.theme": ("1", "3"), "words": ("2", "10")}
    assert "not a secure context" not in honest["text"] and "No findings in 13 entries" in honest["text"]
    assert over["size"] == "15" and over["findings"] == "1" and over["codes"] == [("over_budget", "14")]
    assert "over budget" in over["text"]
