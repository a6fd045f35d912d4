"""`fa audit` as a library: fetch the public transparency log (docs/transparency.md) and recompute what it implies.

```python
from analyst_client.audit import audit_log

report = audit_log("http://127.0.0.1:8000", state="audit-state.json", token=None, log_keys=None)
report.ok, report.findings            # [Finding(code, index, message)]
```

`audit_log` is a pure function of the server's answers, the state file and the token: it never prints, and it
writes only the state file (the newest verified head, atomically, and only when nothing was found). It checks:

1. **Heads.** Every signed head (the stored ones, `GET /v1/log/heads`, the newest and the newest witnessed one,
   `GET /v1/log/head`) verifies under the log key: the keys given (`log_keys`, pinned) or else the served ones
   (current and previous; the report says `key_pinned: false`). All have the log's origin, the served list is
   in increasing size, and no two validly signed heads of one size have different roots (equivocation). The
   newest head's cosignatures verify under the served witness keys.
2. **Roots.** The tree rebuilt from the entries (`translog.merkle`, leaves `translog.entries.entry_leaf_hash`)
   has each head's root at that head's size; the first head that does not match names the altered entry.
   Entries arrive with indexes 0..n−1, no gap.
3. **The last audit.** The state file's head has the root the entries give at its size, and the served
   consistency proof (`GET /v1/log/proof/consistency`) leads from it to the newest head; otherwise the log was
   rewritten since the last audit.
4. **Entries.** Every `task` entry's cohort parameters (`secagg`) meet the safety floor a device computes for its n
   with the default assumptions (`secagg.floor`: active model, degree and threshold; finding `below_floor`). Every
   `task`, `charge`, `refund` and `release` names a query with an earlier `query` entry; a
   query is logged once, with `spec_digest` the digest of its `spec`; a refund follows a charge of the same
   query; a query is charged once, to its own source, plus one charge per further run (`layer` 2, 3, … in order,
   each of the first charge's amounts, naming a logged cohort: a failed opening let its devices contribute
   again). Per source the spend (basic composition,
   `queries.dp.ledger`, as the server's accountant) after every charge, minus refunds, stays within the budget
   in force (the latest `budget` entry of the source, else of `"*"`).
5. **With a token** (what the server says against what it logged), over every page of every list: every query
   `GET /v1/queries` lists has a `query` entry with its kind, source and spec (listed with `?spec=true`, else
   `GET /v1/queries/{id}`); every readable result (`GET /v1/queries/{id}/result`) has a `release` entry whose
   `result_digest` is the digest of the `result` object the route returns; every charge row of
   `GET /v1/budgets/{source}/charges` matches the log's charge (ε, δ, charged or refunded), the log's charges are
   in the ledger, and each source's spent and total match the log's.

The server's views are read between two reads of the newest head (n₀ before, n after), and the log is audited
up to n: everything the views show was logged by then, and what changed between the two reads (a charge, a
refund, a budget) is allowed either way.

Time and memory are linear in the log: entries and heads are read a page at a time and checked as they arrive
(each entry hashed into the tree and walked once, each distinct head verified once, one root per size kept), and
each source's spend is a running sum (`queries.dp.ledger.RunningSpend`) that a charge or a refund changes in
O(1). The findings and their order are those of checking the whole lists at once.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, ValidationError

from analyst_client.client import AnalystClient, ApiError
from queries.dp.errors import BudgetExceeded, PrivacyError
from queries.dp.ledger import Budget, PrivacyCost, RunningSpend, compose_costs
from secagg import floor
from secagg.config import GRAPH_SEED_RULE
from secagg.errors import ConfigError
from translog.entries import DEFAULT_SOURCE, ENTRY_TYPES, EntryError, digest, entry_leaf_hash
from translog.heads import HeadError, SignedHead, key_table, verify_cosignature, verify_head
from translog.merkle import MerkleTree, ProofError, verify_consistency
from translog.wire import (
    MAX_ENTRIES_PAGE,
    HeadModel,
    LogEntriesResponse,
    LogHeadResponse,
    LogHeadsResponse,
    LogKeyResponse,
    ProofResponse,
    b64,
    hashes,
)

STATE_VERSION = 1
TOLERANCE = 1e-9
"""Relative slack when comparing amounts the server reports with the log's (float sums in another order)."""
QUERY_STATUSES_WITH_RESULT = ("succeeded", "failed")
LEDGER_PAGE = 1000
"""A server that does not page `GET /v1/budgets/{source}/charges` lists at most the newest 1,000 charges: an answer
that long may be cut short, and the checks of missing charges are skipped for it."""
CHARGES_PAGE = 500
"""Charges asked for per page: a paging server never answers with LEDGER_PAGE rows at once, one that does not page
may."""

CODES = {
    "bad_head": "a served head is malformed",
    "bad_signature": "a head does not verify under the log keys",
    "key_not_pinned": "the server signs with a key that is not pinned",
    "origin": "a head of another log",
    "heads_order": "the served heads are not in increasing size",
    "equivocation": "two signed heads of one size with different roots",
    "bad_cosignature": "a witness cosignature does not verify",
    "entries_missing": "a signed head covers entries the server does not serve",
    "index_gap": "entry indexes are not 0..n-1",
    "altered": "an entry is not the one the signed heads committed to",
    "rewritten": "the log does not extend the head of the last audit",
    "consistency": "the served consistency proof from the last audit's head does not verify",
    "bad_entry": "a malformed entry",
    "duplicate_query": "a query logged twice",
    "task_conflict": "two task entries for one cohort: its members were shown different tasks",
    "below_floor": "a cohort whose threat model, degree or threshold is below the safety floor for its n (secagg.floor, "
                   "a device's default assumptions): its members' devices would have refused it",
    "spec_digest": "a query entry's spec_digest is not its spec's digest",
    "unlogged_query": "an entry names a query with no earlier query entry",
    "charge_source": "a charge to another source than the query's",
    "duplicate_charge": "a query charged twice",
    "run_unexplained": "a charge for another run of a query out of order, of other amounts than its first, or "
                       "naming no logged cohort of it",
    "refund_without_charge": "a refund with no charge to return",
    "refund_mismatch": "a refund of other amounts than the charge",
    "no_budget": "a charge with no budget logged for its source",
    "over_budget": "a charge that takes the source's spend over its budget",
    "query_unlogged": "a query the server lists has no query entry",
    "query_mismatch": "a listed query differs from its query entry",
    "release_missing": "a readable result with no release entry",
    "result_digest": "a result whose digest differs from its release entry",
    "ledger_unlogged": "a charge in the server's ledger with no charge entry",
    "ledger_mismatch": "a charge in the server's ledger differs from the log",
    "ledger_missing": "a logged charge missing from the server's ledger",
    "spend_mismatch": "a source's spend as the server reports it differs from the log's",
    "budget_mismatch": "a source's total as the server reports it differs from the log's",
}
"""Every finding's code, with what it means."""


class AuditError(Exception):
    """The audit could not run (no transparency log on this server, an answer that is not the documented shape,
    an unreadable state file); the message says which."""


@dataclass(frozen=True)
class Finding:
    code: str
    index: int | None
    """The log entry the finding is about, if one."""
    message: str


@dataclass(frozen=True)
class HeadSummary:
    origin: str
    size: int
    root: str
    """base64"""
    timestamp_ms: int
    key_id: str
    cosignatures: int
    """Cosignatures of this head that verify under the served witness keys."""


@dataclass
class SourceSpend:
    """A source's spend from the log's charges and refunds (basic composition) against the budget in force."""

    source: str
    spent_epsilon: float
    spent_delta: float
    total_epsilon: float | None
    total_delta: float | None
    budget_from: str | None
    """Which `budget` entry is in force: the source's own, "*" (the server default) or None (none logged)."""
    charges: int
    refunds: int
    over: bool
    """Some charge took the spend over the budget in force (see the findings)."""


@dataclass
class AuditReport:
    server: str
    head: HeadSummary | None
    key_id: str | None
    """The key the server signs with now (`GET /v1/log/key`)."""
    key_pinned: bool
    """True when the heads were checked against keys given to the audit; False: against the keys the server serves."""
    entries: int
    entries_by_type: dict[str, int]
    heads_checked: int
    sources: list[SourceSpend]
    findings: list[Finding]
    with_token: bool
    queries_checked: int = 0
    results_checked: int = 0
    charges_checked: int = 0
    state_size: int | None = None
    """The size of the head the state file held (None: no state file, or a new one)."""
    state_saved: bool = False

    @property
    def ok(self) -> bool:
        return not self.findings

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        return out


@dataclass
class _Charge:
    index: int
    query_id: str
    source: str
    epsilon: float
    delta: float
    refund_index: int | None = None
    runs: int = 1
    """Runs of the query's (ε, δ) charged (a failed opening's devices contributed again); ε and δ are totals."""


@dataclass
class _Walk:
    """What walking the entries found out."""

    queries: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    """query id → (index, its entry's kind, source and spec_digest)"""
    charges: dict[str, _Charge] = field(default_factory=dict)
    releases: dict[str, list[tuple[int, dict[str, Any]]]] = field(default_factory=dict)
    """query id → [(index, its entry's result_digest and status)]"""
    budgets: dict[str, list[tuple[int, float, float]]] = field(default_factory=dict)
    """source → [(index, total ε, total δ)] in log order"""
    spends: dict[str, list[tuple[int, float, float]]] = field(default_factory=dict)
    """source → [(index, spent ε, spent δ)] after every charge and refund"""
    counts: Counter[str] = field(default_factory=Counter)
    tasks: dict[str, int] = field(default_factory=dict)
    """cohort id → the index of its task entry"""


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=TOLERANCE, abs_tol=1e-15)


def _b64decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise AuditError(f"{what}: not valid base64") from None


def _atomic_write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_state(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The state file's JSON (None if it does not exist); AuditError if it cannot be read."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise AuditError(f"state file {p}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise AuditError(f"state file {p}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise AuditError(f"state file {p}: expected a JSON object")
    return data


def write_state(path: str | os.PathLike[str], data: dict[str, Any]) -> None:
    """Replace the state file atomically (a temporary file in the same folder, fsync, rename)."""
    _atomic_write(Path(path), data)


class LogReader:
    """The public log routes (no credentials) of one server, each answer checked against its documented shape.
    `client_class` speaks HTTP (an `AnalystClient`; the benchmark's answers from memory)."""

    def __init__(self, base_url: str, timeout_s: float = 30.0,
                 client_class: type[AnalystClient] = AnalystClient) -> None:
        self.http = client_class(base_url, "", timeout_s)

    def _get(self, path: str, model: type[BaseModel]) -> Any:
        answer = self.http.call("GET", path)
        try:
            return model.model_validate(answer)
        except ValidationError as exc:
            raise AuditError(f"GET {path}: not the documented answer: {exc.errors(include_url=False)[:3]}") from None

    def key(self) -> LogKeyResponse:
        try:
            key: LogKeyResponse = self._get("/v1/log/key", LogKeyResponse)
        except ApiError as exc:
            if exc.status == 404:
                raise AuditError(f"{self.http.server} has no transparency log (GET /v1/log/key: 404)") from None
            raise
        return key

    def head(self) -> LogHeadResponse | None:
        """The newest head, None while the log is empty (404)."""
        try:
            head: LogHeadResponse = self._get("/v1/log/head", LogHeadResponse)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return head

    def consistency(self, first: int, second: int) -> list[bytes]:
        proof: ProofResponse = self._get(f"/v1/log/proof/consistency?first={first}&second={second}", ProofResponse)
        try:
            return hashes(proof.proof, "consistency proof")
        except (HeadError, ProofError) as exc:
            raise AuditError(f"GET /v1/log/proof/consistency: {exc}") from None

    def entry_pages(self, size: int) -> Iterator[tuple[list[tuple[int, dict[str, Any]]], int]]:
        """Entries 0..size−1 a page at a time: (the page's entries with their indexes as served, the log size
        it reports). Stops at `size` or at a page with nothing in its range."""
        start = 0
        while start < size:
            end = min(size, start + MAX_ENTRIES_PAGE)
            page: LogEntriesResponse = self._get(f"/v1/log/entries?start={start}&end={end}", LogEntriesResponse)
            got = [(e.index, e.entry) for e in page.entries if start <= e.index < end]
            yield got, page.size
            if not got:
                return
            start = max(i for i, _ in got) + 1

    def entries(self, size: int) -> tuple[list[tuple[int, dict[str, Any]]], int]:
        """Entries 0..size−1, page by page; (entries with their indexes as served, the log size last reported)."""
        out: list[tuple[int, dict[str, Any]]] = []
        reported = size
        for got, reported in self.entry_pages(size):
            out += got
        return out, reported

    def head_pages(self, end: int) -> Iterator[list[HeadModel]]:
        """The stored heads with size < end, a page at a time, in the order served."""
        start = 0
        while start < end:
            stop = min(end, start + MAX_ENTRIES_PAGE)
            page: LogHeadsResponse = self._get(f"/v1/log/heads?start={start}&end={stop}", LogHeadsResponse)
            yield page.heads
            if len(page.heads) >= MAX_ENTRIES_PAGE:  # full: maybe cut short; go on after the last size given
                last = max(h.size for h in page.heads)
                start = last + 1 if last >= start else stop
            else:
                start = stop

    def heads(self, end: int) -> list[HeadModel]:
        """The stored heads with size < end, page by page, in the order served."""
        return [h for page in self.head_pages(end) for h in page]


Progress = Callable[[str, int, "int | None"], None]
"""`progress(stage, done, total)` during an audit: stage "entries", "heads", "queries", "results" or "charges"; total
None when not known ahead."""


class _Heads:
    """The signed heads seen so far, checked as they come (a page at a time): each (size, root) verified once;
    per size the roots that verify, in the order first seen; the findings, in the order the whole list would
    give them (the served order first, then each head's own)."""

    def __init__(self, origin: str, keys: dict[str, bytes]) -> None:
        self.origin = origin
        self.keys = keys
        self.roots: dict[int, bytes] = {}
        """size → the first root that verified at that size"""
        self.more_roots: dict[int, list[bytes]] = {}
        """size → further roots that verified at that size (equivocation)"""
        self.verified = 0
        self.last_size: int | None = None
        self.order: Finding | None = None
        self.findings: list[Finding] = []

    def served(self, page: list[HeadModel]) -> None:
        """A page of `GET /v1/log/heads` (their sizes must increase across pages too)."""
        for model in page:
            if self.order is None and self.last_size is not None and model.size <= self.last_size:
                self.order = Finding("heads_order", None, f"GET /v1/log/heads served a head of size {model.size} "
                                                          f"after one of size {self.last_size}")
            self.last_size = model.size
            self.check(model)

    def check(self, model: HeadModel) -> None:
        try:
            signed = model.parse()
        except HeadError as exc:
            self.findings.append(Finding("bad_head", None, f"the head of size {model.size}: {exc}"))
            return
        size, root = signed.head.size, signed.head.root
        first = self.roots.get(size)
        if first == root or (first is not None and root in self.more_roots.get(size, ())):
            return
        try:
            verify_head(signed, self.keys)
        except HeadError as exc:
            self.findings.append(Finding("bad_signature", None, str(exc)))
            return
        if signed.head.origin != self.origin:
            self.findings.append(Finding("origin", None, f"the head of size {size} is of log {signed.head.origin!r}, "
                                                         f"the server's log is {self.origin!r}"))
        if first is None:
            self.roots[size] = root
        else:
            self.more_roots.setdefault(size, []).append(root)
        self.verified += 1

    def all_findings(self) -> list[Finding]:
        out = ([self.order] if self.order is not None else []) + self.findings
        for size in sorted(self.more_roots):
            group = [self.roots[size], *self.more_roots[size]]
            roots = ", ".join(b64(r) for r in group)
            out.append(Finding("equivocation", size - 1 if size else None,
                               f"the log signed {len(group)} different heads of size {size} (roots {roots}): a proof "
                               f"that the log key holder equivocated"))
        return out

    def root_finding(self, tree: MerkleTree) -> Finding | None:
        """The first size whose signed heads all differ from the entries' root names the altered entry (a size
        with one matching head among several is an equivocation, reported as such)."""
        good = 0
        first_bad: tuple[int, int] | None = None  # (size, last matching size below it)
        later = 0
        for size in sorted(self.roots):
            if size > tree.size:
                continue  # reported by entries_missing
            root = tree.root(size)
            if root == self.roots[size] or root in self.more_roots.get(size, ()):
                if first_bad is None:
                    good = max(good, size)
                continue
            if first_bad is None:
                first_bad = (size, good)
            else:
                later += 1
        if first_bad is None:
            return None
        size, good = first_bad
        tail = f"; {later} later head(s) do not match either" if later else ""
        if good == size - 1:
            msg = f"entry {size - 1} altered or removed: the signed head of size {size} does not match the entries"
        else:
            msg = (f"an entry among {good}..{size - 1} altered or removed: the signed head of size {size} does not "
                   f"match the entries (the one of size {good} does)")
        return Finding("altered", size - 1, msg + tail)


class _Audit:
    def __init__(self, base_url: str, token: str | None, timeout_s: float,
                 client_class: type[AnalystClient] = AnalystClient, progress: Progress | None = None) -> None:
        self.log = LogReader(base_url, timeout_s, client_class)
        self.api = client_class(base_url, token, timeout_s) if token else None
        self.server = self.log.http.server
        self.findings: list[Finding] = []
        self.progress = progress

    def find(self, code: str, index: int | None, message: str) -> None:
        self.findings.append(Finding(code, index, message))

    def _report(self, stage: str, done: int, total: int | None) -> None:
        if self.progress is not None:
            self.progress(stage, done, total)

    # -- the run --------------------------------------------------------------------------------

    def run(self, state_path: str | os.PathLike[str] | None, log_keys: list[bytes] | None) -> AuditReport:
        state = read_state(state_path) if state_path is not None else None
        key = self.log.key()
        served_key = _b64decode(key.public_key, "GET /v1/log/key: public_key")
        if log_keys:
            keys = key_table(log_keys)
            if served_key not in log_keys:
                self.find("key_not_pinned", None, f"the server signs with key {key.key_id}, which is not one of the "
                                                  f"{len(log_keys)} pinned log key(s)")
        else:
            keys = key_table([served_key] + [_b64decode(k, "GET /v1/log/key: previous_keys") for k in key.previous_keys])
        witnesses = {kid: _b64decode(k, f"GET /v1/log/key: witnesses[{kid}]") for kid, k in key.witnesses.items()}

        server_view: _ServerView | None = None
        if self.api is not None:
            first = self.log.head()
            server_view = _ServerView.read(self.api, self._report)
            newest = self.log.head()
            n0 = first.head.size if first is not None else 0
        else:
            newest = self.log.head()
            n0 = None
        n = newest.head.size if newest is not None else 0
        if n0 is None or n0 > n:
            n0 = n

        # entries, page by page: each one hashed into the tree and walked once (the walk's findings are reported
        # after the heads', as when the whole list was fetched first)
        tree = MerkleTree()
        walker = _Walker()
        gap = False
        reported = n
        for page, reported in self.log.entry_pages(n):
            for i, e in page:
                if gap:
                    break
                if i != tree.size:
                    self.find("index_gap", tree.size, f"entry {tree.size} is missing: the server served entry {i} "
                                                      f"after entry {tree.size - 1}")
                    gap = True
                    break
                tree.append(entry_leaf_hash(e))
                walker.feed(i, e)
            self._report("entries", tree.size, n)
        if tree.size < n:
            self.find("entries_missing", tree.size, f"the newest signed head has {n} entries, the server serves "
                                                    f"{tree.size} (its log reports {reported}): entries "
                                                    f"{tree.size}..{n - 1} were removed")

        # heads, page by page: verified as they come, their roots kept by size
        heads = _Heads(key.origin, keys)
        for head_page in self.log.head_pages(n + 1):
            heads.served(head_page)
            self._report("heads", heads.last_size or 0, n)
        if newest is not None:
            heads.check(newest.head)
            if newest.witnessed is not None:
                heads.check(newest.witnessed)
        self.findings += heads.all_findings()
        altered = heads.root_finding(tree)
        if altered is not None:
            self.findings.append(altered)
        head_summary = self._newest(newest, keys, witnesses)

        walk = walker.done()
        self.findings += walker.findings
        sources = walker.spend()
        state_size = self._check_state(state, tree, newest, key.origin) if state is not None else None

        report = AuditReport(
            server=self.server, head=head_summary, key_id=key.key_id, key_pinned=bool(log_keys), entries=tree.size,
            entries_by_type={t: walk.counts[t] for t in ENTRY_TYPES if walk.counts[t]}, heads_checked=heads.verified,
            sources=sources, findings=self.findings, with_token=self.api is not None, state_size=state_size)
        if server_view is not None:
            server_view.compare(self, walk, n0, n, report)
        if state_path is not None and report.ok and newest is not None:
            write_state(state_path, {
                "version": STATE_VERSION, "server": self.server, "head": newest.head.model_dump(),
                "log_key": key.public_key, "key_pinned": bool(log_keys), "audited_at": int(time.time()),
            })
            report.state_saved = True
        return report

    # -- the newest head and the last audit's -----------------------------------------------------

    def _newest(self, newest: LogHeadResponse | None, keys: dict[str, bytes],
                witnesses: dict[str, bytes]) -> HeadSummary | None:
        if newest is None:
            return None
        try:
            signed = newest.head.parse()
        except HeadError:
            return None
        good = 0
        for c in newest.cosignatures:
            if c.key_id not in witnesses:
                continue  # a witness the server no longer lists
            try:
                verify_cosignature(c.parse(), signed.head, witnesses)
                good += 1
            except HeadError as exc:
                self.find("bad_cosignature", None, str(exc))
        h = signed.head
        return HeadSummary(h.origin, h.size, b64(h.root), h.timestamp_ms, signed.key_id, good)

    def _check_state(self, state: Mapping[str, Any], tree: MerkleTree, newest: LogHeadResponse | None,
                     origin: str) -> int:
        try:
            head = HeadModel.model_validate(state.get("head")).parse().head
        except (ValidationError, HeadError) as exc:
            raise AuditError(f"state file: no valid head ({exc})") from None
        m = head.size
        n = newest.head.size if newest is not None else 0
        if head.origin != origin:
            self.find("rewritten", None, f"the last audit followed log {head.origin!r}, the server's log is {origin!r}")
            return m
        if m > tree.size or m > n:
            self.find("rewritten", None, f"log rewritten since the last audit: it had {m} entries then, the server "
                                         f"now serves {min(tree.size, n)}")
            return m
        if tree.root(m) != head.root:
            self.find("rewritten", m - 1 if m else None,
                      f"log rewritten since the last audit: the root of its first {m} entries was {b64(head.root)}, "
                      f"the entries served now give {b64(tree.root(m))}")
        if newest is not None and 0 < m < n:
            try:
                proof = self.log.consistency(m, n)
                verify_consistency(m, n, head.root, newest.head.parse().head.root, proof)
            except (ProofError, HeadError, AuditError) as exc:
                self.find("consistency", None, f"the newest head (size {n}) is not shown to extend the last audit's "
                                               f"head (size {m}): {exc}")
            except ApiError as exc:
                self.find("consistency", None, f"no consistency proof from the last audit's head (size {m}) to the "
                                               f"newest (size {n}): HTTP {exc.status}: {exc.message}")
        return m


class _Walker:
    """The entries' walk (check 4 of the module's doc), fed one entry at a time in log order, O(1) per entry:
    each source's spend is a running sum (`queries.dp.ledger.RunningSpend`) that charges and refunds change,
    not a sum of every earlier charge. Its findings are kept apart (`findings`) until the run reports them."""

    def __init__(self) -> None:
        self.w = _Walk()
        self.findings: list[Finding] = []
        self.active: dict[str, RunningSpend] = {}
        """source → its charges not refunded, keyed (query id, index of the first charge entry)"""
        self.no_budget: set[str] = set()
        self.over: set[int] = set()

    def find(self, code: str, index: int | None, message: str) -> None:
        self.findings.append(Finding(code, index, message))
        if code == "over_budget" and index is not None:
            self.over.add(index)

    def done(self) -> _Walk:
        return self.w

    def feed(self, i: int, e: Any) -> None:
        w = self.w
        kind = e.get("type") if isinstance(e, dict) else None
        if kind not in ENTRY_TYPES:
            self.find("bad_entry", i, f"entry {i} has an unknown type {str(kind)[:40]!r}")
            return
        w.counts[kind] += 1
        problem = _malformed(e)
        if problem:
            self.find("bad_entry", i, f"{kind} entry {i}: {problem}")
            return
        if kind == "budget":
            w.budgets.setdefault(e["source"], []).append((i, float(e["total_epsilon"]), float(e["total_delta"])))
            return
        qid = e["query_id"]
        if kind == "query":
            if qid in w.queries:
                self.find("duplicate_query", i, f"query {qid} is logged again at entry {i} (first at entry "
                                                f"{w.queries[qid][0]})")
                return
            w.queries[qid] = (i, {k: e.get(k) for k in ("kind", "source", "spec_digest")})
            try:
                if digest(e["spec"]) != e["spec_digest"]:
                    self.find("spec_digest", i, f"query entry {i} ({qid}): spec_digest is not the digest of its spec")
            except EntryError as exc:
                self.find("bad_entry", i, f"query entry {i} ({qid}): {exc}")
            return
        if qid not in w.queries:
            self.find("unlogged_query", i, f"{kind} entry {i} names query {qid}, which has no earlier query entry")
        if kind == "task":
            unsafe = _below_floor(e["secagg"])
            if unsafe is not None:
                self.find("below_floor", i, f"cohort {e['cohort_id']} of query {qid} (entry {i}): {unsafe}")
            first = w.tasks.setdefault(e["cohort_id"], i)
            if first != i:
                self.find("task_conflict", i, f"cohort {e['cohort_id']} of query {qid} has a second task entry at "
                                              f"{i} (first at entry {first}): its members were shown different tasks")
        elif kind == "release":
            w.releases.setdefault(qid, []).append((i, {k: e.get(k) for k in ("result_digest", "status")}))
        elif kind == "charge":
            self._charge(i, e)
        elif kind == "refund":
            self._refund(i, e)

    def _tally(self, source: str) -> RunningSpend:
        tally = self.active.get(source)
        if tally is None:
            tally = self.active[source] = RunningSpend()
        return tally

    def _charge(self, i: int, e: dict[str, Any]) -> None:
        w = self.w
        qid, source = e["query_id"], e["source"]
        if "layer" in e:
            self._another_run(i, e)
            return
        logged = w.queries.get(qid)
        if logged is not None and logged[1].get("source") != source:
            self.find("charge_source", i, f"charge {i} of query {qid} is to source {source!r}, the query is over "
                                          f"{logged[1].get('source')!r}")
        if qid in w.charges:
            self.find("duplicate_charge", i, f"query {qid} is charged again at entry {i} (first at entry "
                                             f"{w.charges[qid].index})")
        charge = _Charge(i, qid, source, float(e["epsilon"]), float(e["delta"]))
        w.charges.setdefault(qid, charge)
        self._within_budget(i, qid, source, charge.epsilon, charge.delta)
        self._tally(source).add((qid, i), charge.epsilon, charge.delta, f"charge {i}")
        self._spent(source, i)

    def _another_run(self, i: int, e: dict[str, Any]) -> None:
        """A charge for one more run of a charged query: the next run, the first run's amounts, a logged cohort."""
        w = self.w
        qid, source, layer = e["query_id"], e["source"], e["layer"]
        base = w.charges.get(qid)
        eps, delta = float(e["epsilon"]), float(e["delta"])
        if base is None or base.refund_index is not None or base.source != source:
            self.find("run_unexplained", i, f"charge {i} for run {layer} of query {qid}: the query has no "
                                            f"{'live ' if base is not None else ''}charge to {source!r} to extend")
            return
        if layer != base.runs + 1 or not (_close(eps * base.runs, base.epsilon) and _close(delta * base.runs, base.delta)):
            self.find("run_unexplained", i, f"charge {i} of query {qid} is for run {layer} of epsilon {eps}, delta "
                                            f"{delta}; the query had {base.runs} run(s) of epsilon "
                                            f"{base.epsilon / base.runs:.6g}, delta {base.delta / base.runs:.3g}")
        cohort = e.get("cohort_id")
        if not isinstance(cohort, str) or cohort not in w.tasks:
            self.find("run_unexplained", i, f"charge {i} for run {layer} of query {qid} names cohort {cohort!r}, "
                                            "which has no task entry before it")
        self._within_budget(i, qid, source, eps, delta)
        base.epsilon += eps
        base.delta += delta
        base.runs = layer if isinstance(layer, int) else base.runs + 1
        self._tally(source).add((qid, base.index), eps, delta, f"charge {base.index}")  # the live first charge grows
        self._spent(source, i)

    def _within_budget(self, i: int, qid: str, source: str, epsilon: float, delta: float) -> None:
        """Whether charging (ε, δ) at entry i keeps the source within the budget in force (a finding if not)."""
        try:
            spent = self._tally(source).spent
            budget = _in_force(self.w.budgets, source)
            if budget is None:
                if source not in self.no_budget:
                    self.no_budget.add(source)
                    self.find("no_budget", i, f"charge {i} of query {qid} to source {source!r}: no budget logged for "
                                              f"the source nor a default ('*') before it")
            else:
                bi, be, bd = budget
                try:
                    Budget(be, bd).check(spent, (epsilon, delta))
                except BudgetExceeded:
                    self.find("over_budget", i,
                              f"charge {i} of query {qid} takes source {source!r} to epsilon "
                              f"{spent.epsilon + epsilon:.6g}, delta {spent.delta + delta:.3g}, over its "
                              f"budget (epsilon {be:g}, delta {bd:g}; entry {bi})")
        except PrivacyError as exc:
            self.find("bad_entry", i, f"charge {i} of query {qid}: {exc}")

    def _refund(self, i: int, e: dict[str, Any]) -> None:
        qid, source = e["query_id"], e["source"]
        charge = self.w.charges.get(qid)
        if charge is None:
            self.find("refund_without_charge", i, f"refund {i} of query {qid}: the query was never charged")
            return
        if charge.refund_index is not None:
            self.find("refund_without_charge", i, f"refund {i} of query {qid}: its charge (entry {charge.index}) was "
                                                  f"already refunded at entry {charge.refund_index}")
            return
        if source != charge.source or not (_close(float(e["epsilon"]), charge.epsilon)
                                           and _close(float(e["delta"]), charge.delta)):
            self.find("refund_mismatch", i, f"refund {i} of query {qid} returns epsilon {e['epsilon']}, delta "
                                            f"{e['delta']} to {source!r}; charge {charge.index} took epsilon "
                                            f"{charge.epsilon}, delta {charge.delta} from {charge.source!r}")
        charge.refund_index = i
        tally = self.active.get(charge.source)
        if tally is not None:
            tally.remove((qid, charge.index))
        self._spent(charge.source, i)

    def _spent(self, source: str, i: int) -> None:
        tally = self.active.get(source)
        total = tally.total if tally is not None else PrivacyCost(0.0, 0.0)
        self.w.spends.setdefault(source, []).append((i, total.epsilon, total.delta))

    def spend(self) -> list[SourceSpend]:
        """Each source's spend over the whole log (basic composition of its charges not refunded)."""
        w = self.w
        out = []
        by_source: dict[str, list[_Charge]] = {}
        for c in w.charges.values():
            by_source.setdefault(c.source, []).append(c)
        for source in sorted(set(by_source) | {s for s in w.budgets if s != DEFAULT_SOURCE}):
            charges = by_source.get(source, [])
            try:
                spent = compose_costs((c.epsilon, c.delta) for c in charges if c.refund_index is None)
            except PrivacyError:
                spent = PrivacyCost(math.nan, math.nan)
            own = w.budgets.get(source)
            budget = _in_force(w.budgets, source)
            out.append(SourceSpend(
                source=source, spent_epsilon=spent.epsilon, spent_delta=spent.delta,
                total_epsilon=budget[1] if budget else None, total_delta=budget[2] if budget else None,
                budget_from=(source if own else DEFAULT_SOURCE) if budget else None, charges=len(charges),
                refunds=sum(1 for c in charges if c.refund_index is not None),
                over=any(c.index in self.over for c in charges)))
        return out


def _in_force(budgets: dict[str, list[tuple[int, float, float]]], source: str) -> tuple[int, float, float] | None:
    """The budget in force now (during the walk: the latest logged so far) for `source`."""
    own = budgets.get(source)
    if own:
        return own[-1]
    default = budgets.get(DEFAULT_SOURCE)
    return default[-1] if default else None


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


_FIELDS: dict[str, dict[str, Callable[[Any], bool]]] = {
    "query": {"query_id": lambda v: isinstance(v, str), "source": lambda v: isinstance(v, str),
              "kind": lambda v: isinstance(v, str), "spec": lambda v: isinstance(v, dict),
              "spec_digest": lambda v: isinstance(v, str)},
    "task": {"query_id": lambda v: isinstance(v, str), "cohort_id": lambda v: isinstance(v, str),
             "task_digest": lambda v: isinstance(v, str), "secagg": lambda v: isinstance(v, dict)},
    "charge": {"query_id": lambda v: isinstance(v, str), "source": lambda v: isinstance(v, str),
               "epsilon": _num, "delta": _num},
    "budget": {"source": lambda v: isinstance(v, str), "total_epsilon": _num, "total_delta": _num},
    "release": {"query_id": lambda v: isinstance(v, str), "result_digest": lambda v: isinstance(v, str)},
}
_FIELDS["refund"] = _FIELDS["charge"]


def _below_floor(secagg: Mapping[str, Any]) -> str | None:
    """Why a task entry's cohort parameters are below the floor a device computes with its default assumptions
    (`secagg.floor`), or None."""
    values = [secagg.get(k) for k in ("n", "degree", "threshold")]
    ints = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    if len(ints) != 3:
        return f"cohort parameters n, degree, threshold not all integers: {dict(secagg)}"
    n, degree, threshold = ints
    if secagg.get("threat_model") != "active":
        return f"threat model {secagg.get('threat_model')!r}, not active (no consistency round)"
    if secagg.get("graph_seed") != GRAPH_SEED_RULE:
        return f"graph seed {secagg.get('graph_seed')!r}, not {GRAPH_SEED_RULE}"
    try:
        floor.check(n, degree, threshold)
    except ConfigError as exc:  # UnsafeParametersError, or parameters that are no cohort at all
        return str(exc)
    return None


def _malformed(e: dict[str, Any]) -> str | None:
    bad = [name for name, ok in _FIELDS[e["type"]].items() if not ok(e.get(name))]
    return f"missing or malformed {', '.join(bad)}" if bad else None


@dataclass
class _ServerView:
    """What the server says with analyst credentials: its queries, their specs and results, its ledger."""

    role: str
    queries: list[dict[str, Any]]
    specs: dict[str, Any]
    results: dict[str, dict[str, Any]]
    budgets: dict[str, Any]
    charges: dict[str, dict[str, Any]]
    cut: set[str] = field(default_factory=set)
    """Sources whose charges may have been cut short (a server that does not page them)."""

    @classmethod
    def read(cls, api: AnalystClient, progress: Progress | None = None) -> _ServerView:
        """Every page of every list (the queries with their specs where the server lists them, each source's
        charges), each readable result."""
        def report(stage: str) -> Callable[[int], None]:
            return lambda done: progress(stage, done, None) if progress is not None else None

        who = api.whoami()
        queries = api.queries(with_spec=True, on_page=report("queries"))
        specs: dict[str, Any] = {}
        results: dict[str, dict[str, Any]] = {}
        for q in queries:
            qid = q["id"]
            spec = q.get("spec")  # listed with its spec; else (a server that does not list specs) read it alone
            specs[qid] = spec if spec is not None else api.status(qid).get("spec")
            if q.get("status") in QUERY_STATUSES_WITH_RESULT:
                try:
                    results[qid] = api.result(qid)
                except ApiError as exc:
                    if exc.status not in (404, 409):  # 409: failed without a readable result
                        raise
                if progress is not None and len(results) % 100 == 0:
                    progress("results", len(results), None)
        budgets = api.budgets()
        charges: dict[str, dict[str, Any]] = {}
        cut: set[str] = set()
        on_charges = report("charges")
        for b in budgets.get("budgets") or []:
            pages: list[int] = []

            def count(done: int) -> None:
                pages.append(done)
                on_charges(done)

            data = charges[b["source"]] = api.charges(b["source"], on_page=count, page_size=CHARGES_PAGE)
            if len(pages) == 1 and len(data.get("charges") or []) >= LEDGER_PAGE:
                cut.add(b["source"])  # more than a page in one answer: a server that does not page (cut at 1,000)
        return cls(who.get("role", "analyst"), queries, specs, results, budgets, charges, cut)

    def compare(self, audit: _Audit, w: _Walk, n0: int, n: int, report: AuditReport) -> None:
        find = audit.find
        for q in self.queries:
            qid = q["id"]
            report.queries_checked += 1
            logged = w.queries.get(qid)
            if logged is None:
                find("query_unlogged", None, f"query {qid} ran without a log entry ({q.get('kind')} over source "
                                             f"{q.get('source')!r}, {q.get('status')}, created {q.get('created_at')})")
                continue
            index, entry = logged
            differs = [k for k in ("kind", "source") if q.get(k) != entry.get(k)]
            spec = self.specs.get(qid)
            if spec is not None:
                try:
                    if digest(spec) != entry.get("spec_digest"):
                        differs.append("spec")
                except EntryError:
                    differs.append("spec")
            if differs:
                find("query_mismatch", index, f"query {qid}: the server shows another {', '.join(differs)} than its "
                                              f"query entry {index}")
        for qid, view in self.results.items():
            report.results_checked += 1
            releases = w.releases.get(qid)
            if not releases:
                find("release_missing", None, f"query {qid} has a readable result ({view.get('status')}) but no "
                                              f"release entry")
                continue
            index, entry = releases[-1]
            try:
                got = digest(view.get("result"))
            except EntryError as exc:
                find("result_digest", index, f"query {qid}: its result has no canonical JSON ({exc})")
                continue
            if got != entry.get("result_digest"):
                find("result_digest", index, f"query {qid}: the result the server returns has digest {got}, its "
                                             f"release entry {index} says {entry.get('result_digest')}")
            elif view.get("status") != entry.get("status"):
                find("result_digest", index, f"query {qid}: the server shows it {view.get('status')}, its release "
                                             f"entry {index} says {entry.get('status')}")
        self._compare_ledger(audit, w, n0, n, report)

    def _compare_ledger(self, audit: _Audit, w: _Walk, n0: int, n: int, report: AuditReport) -> None:
        find = audit.find
        listed = {q["id"] for q in self.queries}
        admin = self.role == "admin"
        default = (self.budgets.get("default_epsilon"), self.budgets.get("default_delta"))
        by_source: dict[str, list[_Charge]] = {}
        for charge in w.charges.values():
            by_source.setdefault(charge.source, []).append(charge)
        for b in self.budgets.get("budgets") or []:
            source = b["source"]
            data = self.charges.get(source) or {}
            rows = data.get("charges") or []
            complete = source not in self.cut
            seen: set[str] = set()
            for row in rows:
                report.charges_checked += 1
                qid = row.get("query_id")
                if qid is None:
                    continue  # another analyst's query: counted below
                seen.add(qid)
                c = w.charges.get(qid)
                amounts = f"epsilon {row.get('epsilon')}, delta {row.get('delta')}"
                if c is None:
                    find("ledger_unlogged", None, f"the server's ledger charges query {qid} to source {source!r} "
                                                  f"({amounts}, {row.get('status')}); the log has no charge of it")
                    continue
                if c.source != source or not (_close(float(row["epsilon"]), c.epsilon) and _close(float(row["delta"]), c.delta)):
                    find("ledger_mismatch", c.index, f"query {qid}: the server's ledger charges {amounts} to "
                                                     f"{source!r}; log entry {c.index} charged epsilon {c.epsilon}, "
                                                     f"delta {c.delta} to {c.source!r}")
                if row.get("status") == "refunded" and c.refund_index is None:
                    find("ledger_mismatch", c.index, f"query {qid}: the server's ledger shows its charge refunded; the "
                                                     f"log has no refund of charge {c.index}")
                elif row.get("status") == "charged" and c.refund_index is not None and c.refund_index < n0:
                    find("ledger_mismatch", c.refund_index, f"query {qid}: the server's ledger still charges it; the "
                                                            f"log refunded it at entry {c.refund_index}")
            logged = by_source.get(source, [])
            if complete:
                for c in logged:
                    if c.index < n0 and c.query_id not in seen and (admin or c.query_id in listed):
                        find("ledger_missing", c.index, f"charge {c.index} of query {c.query_id} to {source!r} is "
                                                        f"not in the server's ledger")
                before = sum(1 for c in logged if c.index < n0)
                if not before <= len(rows) <= len(logged):
                    find("ledger_missing", None, f"source {source!r}: the server's ledger lists {len(rows)} charges, "
                                                 f"the log holds {before} (up to entry {n0}) to {len(logged)}")
            spends = _candidates(w.spends.get(source, []), n0, (0.0, 0.0))
            if not any(_close(float(b["spent_epsilon"]), e) and _close(float(b["spent_delta"]), d) for e, d in spends):
                e, d = spends[-1]
                find("spend_mismatch", None, f"source {source!r}: the server reports epsilon {b['spent_epsilon']}, "
                                             f"delta {b['spent_delta']} spent; the log's charges and refunds give "
                                             f"epsilon {e:.6g}, delta {d:.3g}")
            if b.get("configured"):
                totals = _candidates(w.budgets.get(source, []), n0, None)
                who = "its budget entries"
            else:
                totals = _candidates(w.budgets.get(DEFAULT_SOURCE, []), n0, None)
                who = "the default ('*') budget entries"
            reported = (float(b["total_epsilon"]), float(b["total_delta"]))
            if not any(t is not None and _close(reported[0], t[0]) and _close(reported[1], t[1]) for t in totals):
                find("budget_mismatch", None, f"source {source!r}: the server reports a total of epsilon "
                                              f"{reported[0]}, delta {reported[1]}; {who} say "
                                              f"{_totals_text(totals)}")
        listed_sources = {b["source"] for b in self.budgets.get("budgets") or []}
        for qid, c in w.charges.items():
            if c.index < n0 and c.source not in listed_sources:
                find("ledger_missing", c.index, f"charge {c.index} of query {qid} is to source {c.source!r}, which the "
                                                f"server's ledger (GET /v1/budgets) does not list")
                listed_sources.add(c.source)  # once per source
        defaults = _candidates(w.budgets.get(DEFAULT_SOURCE, []), n0, None)
        if default[0] is not None and not any(
                t is not None and _close(float(default[0]), t[0]) and _close(float(default[1] or 0.0), t[1]) for t in defaults):
            find("budget_mismatch", None, f"the server's default total is epsilon {default[0]}, delta {default[1]}; "
                                          f"the default ('*') budget entries say {_totals_text(defaults)}")


def _candidates(history: list[tuple[int, float, float]], n0: int,
                before_any: tuple[float, float] | None) -> list[Any]:
    """The values a history (index, a, b) may show to a reader between log sizes n0 and n: the value at n0 and
    every later one."""
    at_n0: Any = before_any
    later: list[Any] = []
    for i, a, b in history:
        if i < n0:
            at_n0 = (a, b)
        else:
            later.append((a, b))
    return [at_n0] + later


def _totals_text(totals: list[Any]) -> str:
    shown = [f"epsilon {t[0]:g}, delta {t[1]:g}" for t in totals if t is not None]
    return " or ".join(shown) if shown else "nothing (none logged)"


def audit_log(base_url: str, *, state: str | os.PathLike[str] | None = None, token: str | None = None,
              log_keys: list[bytes] | None = None, timeout_s: float = 30.0, progress: Progress | None = None,
              client_class: type[AnalystClient] = AnalystClient) -> AuditReport:
    """Audit the transparency log of the server at `base_url` (docs/transparency.md); see the module's doc.

    `state`: a JSON file holding the newest head of the last successful audit (read if it exists; written,
    atomically, when this audit finds nothing). `token`: an analyst or admin token, for the checks of what the
    server reports against its log (an analyst sees its own queries and their charges; an admin all). `log_keys`:
    the log's Ed25519 public keys to pin (raw 32 bytes); without them the served keys are used. `progress`:
    called as pages are read (`Progress`). `client_class`: the HTTP client (an `AnalystClient` subclass).

    Time and memory are linear in the entries and heads: both are read a page at a time, each entry is hashed and
    walked once, each head verified once, and each source's spend is a running sum.

    Raises AuditError when the audit cannot run, ApiError for an HTTP error of a route the audit needs, OSError
    when the server cannot be reached."""
    return _Audit(base_url, token, timeout_s, client_class, progress).run(state, log_keys)


__all__ = ["AuditError", "AuditReport", "CODES", "Finding", "HeadSummary", "LogReader", "Progress", "SourceSpend",
           "audit_log", "read_state", "write_state"]
