"""The server's database entry object: one `Store` per process holds the engine, the transaction helper with its
named locks (`db`), the injected clock and one repository per aggregate (`store.queries`, `store.cohorts`, …,
and the transparency log, `store.log`).

Repositories only read and write rows; the rules about budgets, quotas, refunds and what the transparency log
records live in `queries.dp` and `analytics_server.blame` (pure) and are applied by `analytics_server.services`,
which run a repository's in-transaction methods and the log's append in one `store.db.tx(...)`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from sqlalchemy.ext.asyncio import AsyncEngine

from analytics_server.db.base import Database, Tx
from analytics_server.db.blame_store import Blame
from analytics_server.db.budget_store import Budgets, BudgetState
from analytics_server.db.cluster_store import Cluster
from analytics_server.db.cohort_store import Cohorts
from analytics_server.db.device_store import Devices
from analytics_server.db.event_store import Events
from analytics_server.db.presence_store import ClaimLost, Presence
from analytics_server.db.query_store import ACTIVE, TERMINAL, Queries, QueryNotLive
from analytics_server.db.reports import Reports
from analytics_server.db.round_store import Rounds, vec_from_bytes, vec_to_bytes
from analytics_server.db.token_store import ROLES, TokenInfo, TokenRow, Tokens
from analytics_server.db.translog_store import TransparencyLog
from fa_common.clock import SYSTEM_CLOCK, Clock


class Store:
    fault_hook: Callable[[str], None] | None = None
    """Fault injection for tests: called with each step of a cohort's formation
    (`services.cohorts_service.FORMATION_STEPS`); raising there stands for the process dying at that step (an open
    transaction rolls back, as the database does for a dead connection)."""

    def __init__(self, engine: AsyncEngine, clock: Clock = SYSTEM_CLOCK) -> None:
        self.engine = engine
        self.clock = clock
        self.db = Database(engine)
        self.sessions = self.db.sessions
        self.tokens = Tokens(self.db, clock)
        self.devices = Devices(self.db, clock)
        self.presence = Presence(self.db, clock)
        self.cluster = Cluster(self.db, clock)
        self.events = Events(self.db, clock)
        self.queries = Queries(self.db, clock)
        self.rounds = Rounds(self.db, clock)
        self.cohorts = Cohorts(self.db, clock, self.queries, self.presence)
        self.budgets = Budgets(self.db, clock)
        self.blame = Blame(self.db, clock, self.budgets)
        self.reports = Reports(self.db, clock)
        self.log = TransparencyLog(self.db, clock)

    def fault(self, step: str) -> None:
        """Call the test fault hook (if any) at a step of a cohort's formation."""
        if self.fault_hook is not None:
            self.fault_hook(step)


__all__ = ["ACTIVE", "BudgetState", "ClaimLost", "ROLES", "TERMINAL", "QueryNotLive", "Store", "TokenInfo", "TokenRow",
           "vec_from_bytes", "vec_to_bytes"]
