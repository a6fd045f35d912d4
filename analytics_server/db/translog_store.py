"""Database side of the public transparency log (docs/transparency.md).

`TransparencyLog` is the log's repository (`store.log`). Entries are appended by the service layer's write
transactions (`store.log.append(session, entries)`, analytics_server/services), in the transaction that records
what they describe, while it holds the `log` lock (`BEGIN IMMEDIATE` on SQLite, the `ledger_locks` row on
PostgreSQL): appends from N processes get consecutive indexes, and a rolled-back transaction leaves no entry.
Each appending transaction also stores the signed head of the new size.

The Merkle tree lives in the database too: every complete subtree's hash (`log_nodes`, level ≥ 1; the leaves'
are `log_entries.leaf_hash`) is written by the transaction appending the leaf that completes it. An append
reads the tree's right edge (its O(log n) peaks, `translog.merkle.CompactRange`); a root or a proof reads the
O(log n) nodes its ranges are made of (`translog.merkle.inclusion_ranges`, `consistency_ranges`) in one
statement per level kind. No process holds the leaves: its memory does not grow with the log.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from analytics_server.db.base import Database, epoch_ms
from analytics_server.db.models import LogCosignature, LogEntry, LogHead, LogKey, LogNode
from fa_common.b64 import b64d, b64e
from translog import entries as te
from translog.heads import Cosignature, SignedHead, Signer, TreeHead, key_table, verify_cosignature
from translog.merkle import CompactRange, Node, Range, consistency_ranges, inclusion_ranges, nodes_of, range_hash, range_nodes
from fa_common.clock import Clock
from translog.wire import CosignatureModel, HeadModel, TaskProof, WitnessedHead

log = logging.getLogger(__name__)
LOG_LOCK = "log"
HEAD_CACHE_S = 1.0
"""A check-in reuses the newest head read this long ago, unless its task entry is newer."""
TASK_CACHE = 4096
"""Cohorts whose task entries a process keeps in memory (then it starts over)."""


class LogUnavailable(RuntimeError):
    """The log has no signing key yet (`TransparencyLog.setup` not run)."""


class LogRangeError(ValueError):
    """A size or index beyond the log (→ 404), or an impossible range (→ 400); the message names it."""


class LogTreeError(RuntimeError):
    """The database lacks a node of the log's tree below its size (rows removed or never written): no proof
    over it can be honest; the message names the first missing node."""


def head_of(row: LogHead) -> SignedHead:
    return SignedHead(TreeHead(row.origin, int(row.size), bytes(row.root), int(row.timestamp_ms)), row.key_id,
                      bytes(row.signature))


def cosig_of(row: LogCosignature) -> Cosignature:
    return Cosignature(row.witness, row.key_id, int(row.time), bytes(row.signature))


@dataclass
class _HeadCache:
    head: SignedHead
    witnessed: tuple[SignedHead, list[Cosignature]] | None
    read_at: float


class TransparencyLog:
    """The transparency log's repository (`store.log`): its key, appends, heads, entries and proofs. What is
    logged, and when, is the service layer's decision (analytics_server/services)."""

    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock
        self._signer: Signer | None = None
        self._origin = ""
        self._heads: _HeadCache | None = None
        self._tasks: dict[str, list[tuple[int, dict[str, Any]]]] = {}

    # -- key and setup ---------------------------------------------------------------------------

    async def setup(self, seed: bytes | None, origin: str | None) -> Signer:
        """Load the log key (`seed`, else the one kept in the database, generated on first use)."""
        if seed is None:
            seed = await self._stored_log_seed()
        signer = Signer(seed)
        self._signer = signer
        self._origin = origin or f"fed-analytics/{signer.key_id}"
        return signer

    async def _stored_log_seed(self) -> bytes:
        async with self.db.sessions() as s:
            row = await s.get(LogKey, "log")
        if row is not None:
            return bytes(row.seed)
        try:
            async with self.db.tx([LOG_LOCK]) as s:
                if await s.get(LogKey, "log") is None:
                    s.add(LogKey(name="log", seed=os.urandom(32)))
        except IntegrityError:  # another process stored one first
            pass
        async with self.db.sessions() as s:
            row = await s.get(LogKey, "log")
        assert row is not None
        return bytes(row.seed)

    @property
    def signer(self) -> Signer:
        if self._signer is None:
            raise LogUnavailable("the transparency log has no key yet")
        return self._signer

    @property
    def origin(self) -> str:
        return self._origin

    # -- appends ------------------------------------------------------------------------------

    async def append(self, s: AsyncSession, entries: list[dict[str, Any]]) -> list[int]:
        """Append `entries` in transaction `s`, which must hold the `log` lock; store the new signed head.
        Returns their indexes. Without a log key (a store used without `setup`, as some unit tests do)
        nothing is appended."""
        if self._signer is None or not entries:
            return []
        size = await _log_size(s)
        edge = await _compact_range(s, size)
        for i, e in enumerate(entries):
            h = te.entry_leaf_hash(e)
            s.add(LogEntry(idx=size + i, type=e["type"], query_id=e.get("query_id"), cohort_id=e.get("cohort_id"),
                           body=te.canonical(e).decode("utf-8"), leaf_hash=h))
            s.add_all([LogNode(level=level, idx=idx, hash=node) for level, idx, node in edge.append(h)])
        new = size + len(entries)
        signed = self.signer.sign_head(TreeHead(self._origin, new, edge.root(), epoch_ms(self.clock)))
        s.add(LogHead(size=new, root=signed.head.root, timestamp_ms=signed.head.timestamp_ms, origin=signed.head.origin,
                      key_id=signed.key_id, signature=signed.signature))
        return list(range(size, new))

    @staticmethod
    async def last_budget(s: AsyncSession, source: str) -> tuple[float, float] | None:
        """(total ε, total δ) of the newest budget entry logged for `source`, if any."""
        rows = await s.execute(select(LogEntry.body).where(LogEntry.type == "budget").order_by(LogEntry.idx.desc()))
        for (body,) in rows:
            e = json.loads(body)
            if e.get("source") == source:
                return float(e.get("total_epsilon")), float(e.get("total_delta"))
        return None

    # -- reads --------------------------------------------------------------------------------

    async def head(self) -> tuple[SignedHead | None, list[Cosignature]]:
        async with self.db.sessions() as s:
            row = (await s.execute(select(LogHead).order_by(LogHead.size.desc()).limit(1))).scalar_one_or_none()
            if row is None:
                return None, []
            cos = (await s.execute(select(LogCosignature).where(LogCosignature.size == row.size))).scalars()
            return head_of(row), [cosig_of(c) for c in cos]

    async def witnessed(self) -> tuple[SignedHead, list[Cosignature]] | None:
        """The newest head witnesses cosigned, with its cosignatures."""
        async with self.db.sessions() as s:
            size = (await s.execute(select(func.max(LogCosignature.size)))).scalar_one_or_none()
            if size is None:
                return None
            row = await s.get(LogHead, size)
            cos = (await s.execute(select(LogCosignature).where(LogCosignature.size == size))).scalars()
            assert row is not None
            return head_of(row), [cosig_of(c) for c in cos]

    async def heads(self, start: int, end: int) -> list[SignedHead]:
        async with self.db.sessions() as s:
            rows = (await s.execute(select(LogHead).where(LogHead.size >= start, LogHead.size < end)
                                    .order_by(LogHead.size))).scalars()
            return [head_of(r) for r in rows]

    async def entries(self, start: int, end: int) -> tuple[int, list[tuple[int, dict[str, Any]]]]:
        """(the log's size, the entries with start ≤ index < end)."""
        async with self.db.sessions() as s:
            size = await _log_size(s)
            rows = (await s.execute(select(LogEntry.idx, LogEntry.body).where(LogEntry.idx >= start, LogEntry.idx < end)
                                    .order_by(LogEntry.idx))).all()
        return size, [(int(i), json.loads(b)) for i, b in rows]

    async def _proofs(self, size: int, proofs: Sequence[Sequence[Range]]) -> list[list[bytes]]:
        """The hashes of each proof's ranges (all below `size`), from the nodes they need, read in one session;
        LogRangeError if the log has fewer than `size` entries."""
        async with self.db.sessions() as s:
            have = await _log_size(s)
            if size > have:
                raise LogRangeError(f"size: the log has {have} entries, not {size}")
            nodes = await _read_nodes(s, nodes_of(r for proof in proofs for r in proof))

        def node(level: int, idx: int) -> bytes:
            return nodes[level, idx]

        return [[range_hash(lo, hi, node) for lo, hi in proof] for proof in proofs]

    async def inclusion(self, index: int, size: int) -> list[bytes]:
        if not 0 <= index < size:
            raise LogRangeError(f"index: must be below size ({index} ≥ {size})")
        return (await self._proofs(size, [inclusion_ranges(index, size)]))[0]

    async def consistency(self, first: int, second: int) -> list[bytes]:
        if not 0 <= first <= second:
            raise LogRangeError(f"first: must be in 0..second ({first} > {second})")
        return (await self._proofs(second, [consistency_ranges(first, second)]))[0]

    async def cosign(self, size: int, cosig: Cosignature, witnesses: dict[str, bytes]) -> bool:
        """Store a witness's cosignature of the head of `size` (HeadError if it does not verify, LogRangeError
        without such a head); False if that witness had already cosigned it."""
        async with self.db.sessions() as s:
            row = await s.get(LogHead, size)
        if row is None:
            raise LogRangeError(f"size: no stored head of size {size}")
        verify_cosignature(cosig, head_of(row).head, witnesses)
        try:
            async with self.db.tx() as s:
                if await s.get(LogCosignature, (size, cosig.key_id)) is not None:
                    return False
                s.add(LogCosignature(size=size, key_id=cosig.key_id, witness=cosig.witness, time=cosig.time,
                                     signature=cosig.signature))
        except IntegrityError:
            return False
        self._heads = None
        return True

    async def _cohort_tasks(self, cohort_id: str) -> list[tuple[int, dict[str, Any]]]:
        """The cohort's `task` entries (index, entry), read once per process: every member's check-in needs them,
        and they are committed with the cohort's assignments, before any can be delivered."""
        found = self._tasks.get(cohort_id)
        if found is None:
            async with self.db.sessions() as s:
                rows = (await s.execute(select(LogEntry.idx, LogEntry.body).where(
                    LogEntry.cohort_id == cohort_id, LogEntry.type == "task").order_by(LogEntry.idx))).all()
            found = [(int(i), json.loads(b)) for i, b in rows]
            if found:
                if len(self._tasks) >= TASK_CACHE:
                    self._tasks.clear()
                self._tasks[cohort_id] = found
        return found

    async def task_proof(self, cohort_id: str, from_size: int | None, with_witness: bool = True,
                             task_digest: bytes | None = None) -> TaskProof | None:
        """What a device gets with its assignment (docs/transparency.md): the proof of the cohort's task entry (with
        `task_digest`, of its entry with that digest); None if there is none."""
        found = await self._cohort_tasks(cohort_id[:32])
        if task_digest is not None:
            found = [(i, e) for i, e in found if e.get("task_digest") == task_digest.hex()]
        if not found:
            return None
        idx, body = found[0]
        cache = self._heads
        if cache is None or cache.head.head.size <= idx or self.clock.monotonic() - cache.read_at > HEAD_CACHE_S:
            head, _ = await self.head()
            if head is None:
                return None
            cache = self._heads = _HeadCache(head, await self.witnessed() if with_witness else None,
                                             self.clock.monotonic())
        size = cache.head.head.size
        consistent = from_size is not None and from_size <= size
        witnessed = cache.witnessed if cache.witnessed is not None and cache.witnessed[0].head.size <= size else None
        try:
            inclusion, consistency, wconsistency = await self._proofs(size, [
                inclusion_ranges(idx, size),
                consistency_ranges(from_size, size) if consistent and from_size is not None else [],
                consistency_ranges(witnessed[0].head.size, size) if witnessed is not None else []])
        except (LogRangeError, LogTreeError) as exc:  # entries missing below the newest head: no proof can be honest
            log.error("transparency log: cannot prove entry %d under the head of size %d: %s", idx, size, exc)
            return None
        proof = TaskProof(index=idx, entry=body, head=HeadModel.of(cache.head), inclusion=[b64e(h) for h in inclusion])
        if consistent:
            proof.from_size = from_size
            proof.consistency = [b64e(h) for h in consistency]
        if witnessed is not None:
            w, cos = witnessed
            proof.witnessed = WitnessedHead(
                head=HeadModel.of(w), cosignatures=[CosignatureModel.of(c) for c in cos],
                consistency=[b64e(h) for h in wconsistency])
        return proof


async def _log_size(s: AsyncSession) -> int:
    """Entries in the log: one past the largest index (the primary key's index answers without a scan)."""
    top = (await s.execute(select(func.max(LogEntry.idx)))).scalar_one_or_none()
    return 0 if top is None else int(top) + 1


async def _read_nodes(s: AsyncSession, wanted: set[Node]) -> dict[Node, bytes]:
    """The hashes of the complete subtrees `wanted` (level 0 from the entries); LogTreeError if one is missing."""
    found: dict[Node, bytes] = {}
    leaves = [idx for level, idx in wanted if level == 0]
    inner = [(level, idx) for level, idx in wanted if level > 0]
    if leaves:
        for i, h in await s.execute(select(LogEntry.idx, LogEntry.leaf_hash).where(LogEntry.idx.in_(leaves))):
            found[0, int(i)] = bytes(h)
    if inner:  # per level `idx IN (…)`, OR-ed: an index search each (SQLite scans the table for a row-value IN list)
        levels: dict[int, list[int]] = {}
        for level, idx in inner:
            levels.setdefault(level, []).append(idx)
        where = or_(*(and_(LogNode.level == level, LogNode.idx.in_(idxs)) for level, idxs in sorted(levels.items())))
        for level, i, h in await s.execute(select(LogNode.level, LogNode.idx, LogNode.hash).where(where)):
            found[int(level), int(i)] = bytes(h)
    if len(found) < len(wanted):
        level, idx = min(wanted - found.keys())
        raise LogTreeError(f"the log's tree lacks node (level {level}, index {idx}) in the database")
    return found


async def _compact_range(s: AsyncSession, size: int) -> CompactRange:
    """The right edge of the tree of the first `size` leaves (its peaks), read from the database."""
    peaks = range_nodes(0, size)
    nodes = await _read_nodes(s, set(peaks))
    return CompactRange(size, [nodes[p] for p in peaks])


def parse_witness_keys(text: str) -> dict[str, bytes]:
    """`name=base64,…` (FA_LOG_WITNESS_KEYS) → key id → public key; ValueError naming the bad item."""
    keys: list[bytes] = []
    for item in filter(None, (x.strip() for x in text.split(","))):
        name, sep, key = item.partition("=")
        try:
            if not (name and sep and key):
                raise ValueError
            raw = b64d(key, name)
        except ValueError:
            raise ValueError(f"log_witness_keys: {item[:40]!r} is not name=<base64 key>") from None
        if len(raw) != 32:
            raise ValueError(f"log_witness_keys: {item[:40]!r}: an Ed25519 key is 32 bytes")
        keys.append(raw)
    return key_table(keys)


__all__ = ["LOG_LOCK", "LogRangeError", "LogTreeError", "LogUnavailable", "TransparencyLog", "parse_witness_keys"]
