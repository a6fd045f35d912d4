"""An admin sets a source's privacy budget: the new total is logged (transparency log) in the transaction that
stores it, under the source's lock. At start-up the server's default budget is logged when it changed."""

from __future__ import annotations

from analytics_server.db.base import epoch_ms, shielded
from analytics_server.db.store import Store
from analytics_server.db.translog_store import LOG_LOCK
from queries.dp.ledger import Budget
from translog import entries as te


@shielded
async def set_budget(store: Store, source: str, total_epsilon: float, total_delta: float) -> None:
    """Set a source's total (may be below what is already spent: then nothing more fits)."""
    Budget(total_epsilon, total_delta)  # validates
    async with store.db.tx([f"source:{source}", LOG_LOCK]) as s:
        await store.log.append(s, [te.budget_entry(source, total_epsilon, total_delta, epoch_ms(store.clock))])
        await store.budgets.set_total(s, source, total_epsilon, total_delta)


@shielded
async def log_budget(store: Store, source: str, total_epsilon: float, total_delta: float) -> bool:
    """Log a budget (the server's default: `translog.entries.DEFAULT_SOURCE`) unless the last one logged for
    `source` is the same; True if it appended."""
    async with store.db.tx([LOG_LOCK]) as s:
        if await store.log.last_budget(s, source) == (float(total_epsilon), float(total_delta)):
            return False
        await store.log.append(s, [te.budget_entry(source, total_epsilon, total_delta, epoch_ms(store.clock))])
    return True


__all__ = ["log_budget", "set_budget"]
