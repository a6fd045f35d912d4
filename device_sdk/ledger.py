"""The device's own privacy ledger and transparency log: one row per contribution, in the `LocalStore` file.

A row is written (`reserve`) when the device accepts an assignment, before it reads any data, with the ε it
will charge; it becomes `sent` when the masked vector leaves the device (`mark_sent`) and `finished` /
`abandoned` when the cohort ends. A row never sent is deleted (`release`): nothing left the device, nothing
is charged. A row left `pending` by a crash stays charged (the device cannot know what was sent).

Charging: a query's (ε, δ) covers all its rounds with one contribution per device per round. The device
charges the query's ε once for its first contribution, and once more each time it would contribute to a
round of that query more often than to any round before (k contributions to one round need at most k runs
of the query — basic composition): so a server that seats the device in a second cohort of the same round
is charged for it, and an honest one never is. Daily totals sum the charges of the last 24 hours.

The transparency log (`records`) lists what left the device, with the server log's entry and signed head the
device checked the task against (docs/transparency.md): query, round, cohort, kind, collection, times,
ε charged and the query's (ε, δ), the noise mechanism and scale, whether proofs were used, and whether the
server counted it in the sum. It also keeps the cohorts the device refused because the server could not be
checked (`refused`: status `refused`, nothing sent, nothing charged, the reason in `detail`): rows that never
count toward spending, participation or a query's history.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from device_sdk.store import LocalStore

DAY_S = 86_400.0
LOG_KEEP_S = 400 * DAY_S
"""Log rows older than this are deleted (`prune`), unless their query still has rounds to come."""
LOG_KEEP_ROWS = 20_000

Status = Literal["pending", "sent", "finished", "abandoned", "refused"]

_COLUMNS = (
    "id", "query_id", "round", "cohort_id", "kind", "source", "accepted_at", "sent_at", "ended_at", "status",
    "contributed", "mechanism", "epsilon", "delta", "query_epsilon", "query_delta", "query_privacy",
    "noise_scale", "noise_std", "encoding_scale", "proofs", "cohort_size", "min_survivors", "detail",
    "log_index", "log_size", "log_root",
)
_LOG_COLUMNS = (("log_index", "INTEGER"), ("log_size", "INTEGER"), ("log_root", "TEXT"))
"""Added after the first release: opened stores gain them (NULL for older rows)."""


@dataclass(frozen=True)
class ContributionRecord:
    """One contribution as the device's user may see it."""

    id: int
    query_id: str
    round: int
    cohort_id: str
    kind: str
    source: str
    accepted_at: float
    """Unix time the device accepted the assignment (before it read any data)."""
    sent_at: float | None
    """Unix time its masked vector left the device (None: not yet, or a crash before it could say)."""
    ended_at: float | None
    status: Status
    contributed: bool | None
    """Whether the server reported the vector in the cohort's sum (None: not known)."""
    mechanism: str
    """The noise the device added: discrete_gaussian, skellam or none."""
    epsilon: float | None
    """ε this contribution charged to the device's ledger (0 for later rounds of a query already charged;
    None without noise: no finite guarantee)."""
    delta: float | None
    query_epsilon: float | None
    """The query's (ε, δ) over all its rounds."""
    query_delta: float | None
    query_privacy: dict[str, Any]
    """The assignment's public privacy parameters, as the device checked them."""
    noise_scale: float | None
    """The per-device noise scale the device used (σ, or Skellam's variance μ)."""
    noise_std: float | None
    encoding_scale: int
    proofs: bool
    """Whether the contribution came with validity proofs."""
    cohort_size: int
    min_survivors: int | None
    """The fewest survivors the device would unmask for."""
    detail: str
    log_index: int | None = None
    """The cohort's task entry in the server's transparency log (docs/transparency.md), None if not checked."""
    log_size: int | None = None
    """The size of the signed log head the device checked the entry under."""
    log_root: str | None = None
    """That head's root (base64)."""

    @property
    def noise(self) -> bool:
        return self.mechanism != "none"

    def to_dict(self) -> dict[str, Any]:
        out = {c: getattr(self, c) for c in _COLUMNS}
        out["noise"] = self.noise
        return out


@dataclass(frozen=True)
class QueryHistory:
    """What the device has contributed to one query so far."""

    privacy: dict[str, Any] | None
    """The privacy parameters of its first contribution to the query (None: none yet)."""
    per_round: Counter[int]
    """Contributions per round (pending, sent or ended after sending)."""
    layers_charged: int
    """How many times the query's ε has been charged (= the most contributions to any one round)."""
    weights: dict[int, float] = field(default_factory=dict)
    """Per round contributed to, its privacy weight (unit rounds of the query's budget; 1 when not stated)."""


class ContributionLedger:
    def __init__(self, store: LocalStore) -> None:
        self.store = store
        with store.transaction() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS contributions (id INTEGER PRIMARY KEY, query_id TEXT NOT NULL, "
                "round INTEGER NOT NULL, cohort_id TEXT NOT NULL, kind TEXT NOT NULL, source TEXT NOT NULL, "
                "accepted_at REAL NOT NULL, sent_at REAL, ended_at REAL, status TEXT NOT NULL, contributed INTEGER, "
                "mechanism TEXT NOT NULL, epsilon REAL, delta REAL, query_epsilon REAL, query_delta REAL, "
                "query_privacy TEXT NOT NULL, noise_scale REAL, noise_std REAL, encoding_scale INTEGER NOT NULL, "
                "proofs INTEGER NOT NULL, cohort_size INTEGER NOT NULL, min_survivors INTEGER, detail TEXT NOT NULL)"
            )
            have = {r[1] for r in db.execute("PRAGMA table_info(contributions)")}
            for name, sql_type in _LOG_COLUMNS:
                if name not in have:
                    db.execute(f"ALTER TABLE contributions ADD COLUMN {name} {sql_type}")
            db.execute("CREATE INDEX IF NOT EXISTS contributions_query ON contributions (query_id)")
            db.execute("CREATE INDEX IF NOT EXISTS contributions_time ON contributions (accepted_at)")

    # -- reads ----------------------------------------------------------------------------------

    def history(self, query_id: str) -> QueryHistory:
        with self.store.transaction() as db:
            rows = db.execute(
                "SELECT round, query_privacy, epsilon FROM contributions WHERE query_id = ? AND status != 'refused' "
                "ORDER BY id", (query_id,)
            ).fetchall()
        per_round: Counter[int] = Counter(r for r, _, _ in rows)
        first = json.loads(rows[0][1]) if rows else None
        layers = sum(1 for _, _, eps in rows if eps)  # each row that charged ε opened one more layer
        weights: dict[int, float] = {}
        for r, privacy, _ in rows:
            w = json.loads(privacy).get("weight", 1.0)
            weights[r] = max(weights.get(r, 0.0), float(w) if isinstance(w, (int, float)) else 1.0)
        return QueryHistory(first, per_round, layers, weights)

    def spent_since(self, since: float) -> tuple[float, float, int]:
        """(ε, δ, contributions) charged by rows accepted at or after `since` (no-noise rows count as ε 0
        here: the policy refuses them whenever it caps ε)."""
        with self.store.transaction() as db:
            eps, delta, n = db.execute(
                "SELECT COALESCE(SUM(epsilon), 0), COALESCE(SUM(delta), 0), COUNT(*) FROM contributions "
                "WHERE accepted_at >= ? AND status != 'refused'", (since,)
            ).fetchone()
        return float(eps), float(delta), int(n)

    def oldest_since(self, since: float, charging: bool = False) -> float | None:
        """Acceptance time of the oldest row at or after `since` (with `charging`, of one that charged ε)."""
        extra = " AND epsilon > 0" if charging else ""
        with self.store.transaction() as db:
            row = db.execute(f"SELECT MIN(accepted_at) FROM contributions WHERE accepted_at >= ? AND status != 'refused'"
                             f"{extra}", (since,)).fetchone()
        return None if row[0] is None else float(row[0])

    def records(self, since: float | None = None, limit: int = 1000) -> list[ContributionRecord]:
        """The transparency log, newest first: every contribution accepted (pending ones included)."""
        where, args = ("WHERE accepted_at >= ?", [since]) if since is not None else ("", [])
        with self.store.transaction() as db:
            rows = db.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM contributions {where} ORDER BY id DESC LIMIT ?", (*args, int(limit))
            ).fetchall()
        return [_record(r) for r in rows]

    def record(self, row_id: int) -> ContributionRecord | None:
        with self.store.transaction() as db:
            row = db.execute(f"SELECT {', '.join(_COLUMNS)} FROM contributions WHERE id = ?", (row_id,)).fetchone()
        return None if row is None else _record(row)

    # -- writes ---------------------------------------------------------------------------------

    def reserve(self, **fields: Any) -> int:
        """Write a pending row (the caller has checked the policy in the same store transaction)."""
        fields = {**fields, "status": "pending", "accepted_at": fields.get("accepted_at", self.store.clock.time())}
        fields["query_privacy"] = json.dumps(fields.get("query_privacy") or {}, sort_keys=True)
        fields["proofs"] = int(bool(fields.get("proofs")))
        fields.setdefault("detail", "")
        names = [c for c in _COLUMNS if c != "id" and c in fields]
        with self.store.transaction() as db:
            cur = db.execute(
                f"INSERT INTO contributions ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)})",
                [fields[c] for c in names],
            )
            return int(cur.lastrowid or 0)

    def set_log(self, row_id: int, index: int, size: int, root: str) -> None:
        """Record the log entry and head the device checked its task against."""
        with self.store.transaction() as db:
            db.execute("UPDATE contributions SET log_index = ?, log_size = ?, log_root = ? WHERE id = ?",
                       (index, size, root, row_id))

    def mark_sent(self, row_id: int, at: float | None = None) -> None:
        with self.store.transaction() as db:
            db.execute("UPDATE contributions SET status = 'sent', sent_at = ? WHERE id = ? AND status = 'pending'",
                       (self.store.clock.time() if at is None else at, row_id))

    def finish(self, row_id: int, status: Status, contributed: bool | None, detail: str = "") -> None:
        """The cohort ended after the vector was sent (`finished` or `abandoned`)."""
        with self.store.transaction() as db:
            db.execute(
                "UPDATE contributions SET status = ?, contributed = ?, ended_at = ?, detail = ? WHERE id = ?",
                (status, None if contributed is None else int(contributed), self.store.clock.time(), detail[:500], row_id),
            )

    def refused(self, row_id: int, reason: str, detail: str) -> None:
        """Nothing was sent because the device refused the cohort after checking it: the row stays in the
        transparency log, charging nothing."""
        with self.store.transaction() as db:
            db.execute(
                "UPDATE contributions SET status = 'refused', epsilon = NULL, delta = NULL, ended_at = ?, detail = ? "
                "WHERE id = ? AND status = 'pending'", (self.store.clock.time(), f"{reason}: {detail}"[:500], row_id),
            )

    def release(self, row_id: int) -> None:
        """Nothing was sent: the row and its charge go."""
        with self.store.transaction() as db:
            db.execute("DELETE FROM contributions WHERE id = ? AND status = 'pending'", (row_id,))

    def prune(self, now: float | None = None, keep_s: float = LOG_KEEP_S, keep_rows: int = LOG_KEEP_ROWS) -> int:
        """Delete log rows older than `keep_s` and beyond the newest `keep_rows` (never within the last day,
        which the daily limits read)."""
        now = self.store.clock.time() if now is None else now
        cutoff = min(now - keep_s, now - DAY_S)
        with self.store.transaction() as db:
            n = db.execute("DELETE FROM contributions WHERE accepted_at < ?", (cutoff,)).rowcount
            n += db.execute(
                "DELETE FROM contributions WHERE accepted_at < ? AND id NOT IN "
                "(SELECT id FROM contributions ORDER BY id DESC LIMIT ?)", (now - DAY_S, keep_rows)
            ).rowcount
        return int(n)


def _record(row: tuple[Any, ...]) -> ContributionRecord:
    d = dict(zip(_COLUMNS, row))
    d["contributed"] = None if d["contributed"] is None else bool(d["contributed"])
    d["proofs"] = bool(d["proofs"])
    d["query_privacy"] = json.loads(d["query_privacy"])
    return ContributionRecord(**d)


__all__ = ["ContributionLedger", "ContributionRecord", "QueryHistory"]
