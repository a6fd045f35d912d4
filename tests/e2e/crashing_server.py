"""A server process that dies, by its own SIGKILL, at one step of storing a forming cohort (issue 47):
`FA_DIE_AT=STEP python -m tests.e2e.crashing_server serve --db URL --port P`, STEP one of `FORMATION_STEPS`
(analytics_server/services/cohorts_service.py). Nothing of the process runs after that: no rollback it sends, no clean-up,
no lease released; PostgreSQL rolls back its open transaction when the connection drops. Used by
tests/e2e/test_formation_crash_e2e.py."""

from __future__ import annotations

import os
import signal
import sys

from analytics_server import cli
from analytics_server.db.store import Store
from analytics_server.services.cohorts_service import FORMATION_STEPS


def die_at(step: str) -> None:
    """Every store of this process calls the hook at each formation step; at `step` the process kills itself."""
    if step not in FORMATION_STEPS:
        raise SystemExit(f"FA_DIE_AT={step!r}: not one of {', '.join(FORMATION_STEPS)}")

    def hook(at: str) -> None:
        if at == step:
            os.kill(os.getpid(), signal.SIGKILL)

    Store.fault_hook = staticmethod(hook)  # a class attribute: not bound to the store


def main(argv: list[str] | None = None) -> int:
    die_at(os.environ["FA_DIE_AT"])
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
