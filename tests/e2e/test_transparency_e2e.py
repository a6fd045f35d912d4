"""Acceptance: `fa audit` against a real server process and its database, altered as its operator could.

An honest history (a noisy histogram over an `fa-sim` fleet, a budget set, a query cancelled and refunded) audits
clean, and `fa audit --state` saves its head. Then, each time restoring the database first:
- a charge row lowered in `privacy_charges` → `fa audit` (with a token) exits 1 naming the query's charge entry;
- a query inserted as if run off the books (its row and its charge, no log entries) → named as unlogged;
- a log entry rewritten in place → named as altered, at its index;
- the same rewrite with every head re-signed under the log key (which a demo server keeps in its database) → the
  log itself is consistent again, but not with the head the last audit saved: "rewritten".
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from analyst_client.audit import audit_log
from analyst_client.cli import AnalystClient
from tests.e2e.harness import Fleet, Server, audit_clean, server_on_fresh_sqlite
from translog import entries as te
from translog.heads import Signer, TreeHead
from translog.merkle import MerkleTree

pytestmark = pytest.mark.e2e
SPEC = {"kind": "histogram", "name": "audited", "source": "words",
        "params": {"buckets": ["moon", "sun", "star"], "other_bucket": "other"},
        "privacy": {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6, "validation": "none"},
        "cohort": {"min_clients": 30, "max_clients": 40, "phase_timeout_s": 10}}


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path, str, str]]:
    """(server, its SQLite file, the succeeded query's id, an admin token) after an honest history."""
    tmp = tmp_path_factory.mktemp("transparency")
    with server_on_fresh_sqlite(tmp) as server:
        token = server.token("admin")
        admin = AnalystClient(server.url, token)
        admin.call("PUT", "/v1/admin/budgets/words", {"epsilon": 5.0, "delta": 1e-5})
        fleet = Fleet(server.url, 40, tmp, seed=3)
        try:
            qid = admin.submit(SPEC)["id"]
            assert admin.wait(qid, timeout_s=240)["status"] == "succeeded"
        finally:
            fleet.stop()
        cancelled = admin.submit({**SPEC, "name": "cancelled"})["id"]
        admin.call("POST", f"/v1/queries/{cancelled}/cancel")
        yield server, tmp / "fa.db", qid, token


def _fa_audit(server: Server, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    fa = str(Path(sys.executable).with_name("fa"))
    auth = ["--token", token] if token else []
    return subprocess.run([fa, "--server", server.url, *auth, "audit", *args], capture_output=True, text=True,
                          timeout=120)


def _scalar(db: Path, statement: str, **params: object) -> float:
    engine = create_engine(f"sqlite:///{db}")
    with engine.connect() as c:
        value = c.execute(text(statement), params).scalar_one()
    engine.dispose()
    return float(value)


def _sql(db: Path, statement: str, **params: object) -> None:
    engine = create_engine(f"sqlite:///{db}")
    with engine.begin() as c:
        c.execute(text(statement), params)
    engine.dispose()


@pytest.fixture
def pristine(history: tuple[Server, Path, str, str], tmp_path: Path) -> Iterator[tuple[Server, Path, str, str, Path]]:
    """The honest history, audited clean by `fa audit` with a saved state. Each test undoes its own tampering
    (the database is in WAL mode, so it is not copied back); this checks it did."""
    server, db, qid, token = history
    state = tmp_path / "audit.json"
    done = _fa_audit(server, "--state", str(state), token=token)
    assert done.returncode == 0, done.stdout + done.stderr
    yield server, db, qid, token, state
    assert audit_log(server.url, token=token).ok


def test_an_honest_history_audits_clean_with_and_without_a_token(history: tuple[Server, Path, str, str],
                                                                 tmp_path: Path) -> None:
    server, _, qid, token = history
    report = audit_clean(server.url, token, tmp_path / "state.json")
    counts = report.entries_by_type
    assert counts["query"] == 2 and counts["charge"] == 2 and counts["refund"] == 1
    assert counts["release"] == 1 and counts["task"] >= 1
    words = {s.source: s for s in report.sources}["words"]
    assert words.spent_epsilon == pytest.approx(1.0) and not words.over
    assert audit_clean(server.url).ok  # the public log alone: anyone can run this
    assert report.state_saved and (tmp_path / "state.json").exists()


def test_a_lowered_charge_row_is_named(pristine: tuple[Server, Path, str, str, Path]) -> None:
    server, db, qid, token, state = pristine
    original = _scalar(db, "SELECT epsilon FROM privacy_charges WHERE query_id = :q", q=qid)
    _sql(db, "UPDATE privacy_charges SET epsilon = :e WHERE query_id = :q", e=original / 10, q=qid)
    try:
        done = _fa_audit(server, "--state", str(state), token=token)
        report = audit_log(server.url, token=token)
    finally:
        _sql(db, "UPDATE privacy_charges SET epsilon = :e WHERE query_id = :q", e=original, q=qid)
    assert done.returncode == 1, done.stdout + done.stderr
    codes = {f.code for f in report.findings}
    assert "ledger_mismatch" in codes, report.findings
    named = [f for f in report.findings if f.code == "ledger_mismatch"]
    assert qid in named[0].message and named[0].index == _charge_index(server, qid), named


def test_a_query_run_off_the_books_is_named(pristine: tuple[Server, Path, str, str, Path]) -> None:
    server, db, qid, token, _ = pristine
    now = datetime.now(timezone.utc).isoformat(sep=" ")
    _sql(db, "INSERT INTO queries (id, kind, name, source, spec, status, state, current_round, rounds_upper_bound, "
             "created_at, updated_at, finished_at, result, privacy) VALUES ('0ffb00c500000000', 'histogram', 'ghost', "
             "'words', :spec, 'succeeded', '{}', 1, 1, :now, :now, :now, '{\"counts\": {\"moon\": 1}}', '{}')",
         spec=json.dumps(SPEC), now=now)
    _sql(db, "INSERT INTO privacy_charges (source, query_id, epsilon, delta, status, created_at) "
             "VALUES ('words', '0ffb00c500000000', 1.0, 1e-6, 'charged', :now)", now=now)
    try:
        done = _fa_audit(server, token=token)
        report = audit_log(server.url, token=token)
    finally:
        _sql(db, "DELETE FROM privacy_charges WHERE query_id = '0ffb00c500000000'")
        _sql(db, "DELETE FROM queries WHERE id = '0ffb00c500000000'")
    assert done.returncode == 1
    codes = {f.code for f in report.findings}
    assert {"query_unlogged", "ledger_unlogged"} <= codes, report.findings
    assert any("0ffb00c500000000" in f.message for f in report.findings if f.code == "query_unlogged")


def test_a_rewritten_entry_is_named_at_its_index(pristine: tuple[Server, Path, str, str, Path]) -> None:
    server, db, qid, token, _ = pristine
    index = _charge_index(server, qid)
    with _rewritten(db, index, resign=False):
        done = _fa_audit(server)
        report = audit_log(server.url)
    assert done.returncode == 1
    assert [(f.code, f.index) for f in report.findings][:1] == [("altered", index)], report.findings


def test_a_rewrite_re_signed_under_the_log_key_breaks_with_the_saved_head(
        pristine: tuple[Server, Path, str, str, Path]) -> None:
    server, db, qid, _, state = pristine
    with _rewritten(db, _charge_index(server, qid), resign=True):
        alone = audit_log(server.url)
        done = _fa_audit(server, "--state", str(state))
        codes = {f.code for f in audit_log(server.url, state=state).findings}
    assert alone.ok, "re-signed, the log is consistent with itself: only a kept head can tell"
    assert done.returncode == 1, done.stdout + done.stderr
    assert "rewritten" in codes, codes


def _charge_index(server: Server, qid: str) -> int:
    page = AnalystClient(server.url, "").call("GET", "/v1/log/entries?start=0&end=1000")
    (index,) = [e["index"] for e in page["entries"] if e["entry"]["type"] == "charge" and e["entry"]["query_id"] == qid]
    return int(index)


@contextmanager
def _rewritten(db: Path, index: int, resign: bool) -> Iterator[None]:
    """Lower the ε of charge entry `index` in place; with `resign`, recompute and re-sign every head with the key
    the server keeps in its database (no FA_LOG_KEY_FILE), as an operator with database access can. Undone after."""
    engine = create_engine(f"sqlite:///{db}")
    with engine.begin() as c:
        body, leaf = c.execute(text("SELECT body, leaf_hash FROM log_entries WHERE idx = :i"), {"i": index}).one()
        heads = c.execute(text("SELECT size, root, signature FROM log_heads")).all()
        changed = json.loads(body)
        changed["epsilon"] = changed["epsilon"] / 10
        c.execute(text("UPDATE log_entries SET body = :b, leaf_hash = :h WHERE idx = :i"),
                  {"b": te.canonical(changed).decode(), "h": te.entry_leaf_hash(changed), "i": index})
        if resign:
            seed = c.execute(text("SELECT seed FROM log_keys WHERE name = 'log'")).scalar_one()
            signer = Signer(bytes(seed))
            tree = MerkleTree(bytes(h) for (h,) in c.execute(text("SELECT leaf_hash FROM log_entries ORDER BY idx")))
            for size, origin, ts in c.execute(text("SELECT size, origin, timestamp_ms FROM log_heads")).all():
                signed = signer.sign_head(TreeHead(origin, size, tree.root(size), ts))
                c.execute(text("UPDATE log_heads SET root = :r, signature = :s WHERE size = :n"),
                          {"r": signed.head.root, "s": signed.signature, "n": size})
    try:
        yield
    finally:
        with engine.begin() as c:
            c.execute(text("UPDATE log_entries SET body = :b, leaf_hash = :h WHERE idx = :i"),
                      {"b": body, "h": leaf, "i": index})
            for size, root, signature in heads:
                c.execute(text("UPDATE log_heads SET root = :r, signature = :s WHERE size = :n"),
                          {"r": root, "s": signature, "n": size})
        engine.dispose()
