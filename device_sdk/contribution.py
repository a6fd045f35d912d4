"""One accepted assignment's bookkeeping between the policy, the ledger and the protocol run.

`DeviceClient` admits an assignment (parsed once, `device_sdk.admission`; policy check and ledger reservation,
before any data is read) and gets a `Contribution`, which carries the parsed assignment; the run then asks it for
the survivor floor to hold the cohort to, lets it check the vector against the declared bounds (kinds that cannot
bound it from the task), tells it before each message goes out (`before_send`: the masked input is where the data leaves the device) and ends it with the
cohort's outcome, which settles the ledger row: charged and logged if anything was sent, released if not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from device_sdk.admission import ParsedAssignment
from device_sdk.ledger import ContributionLedger, ContributionRecord
from device_sdk.policy import Decision, Refusal, refuse
from queries.envelope import Assignment
from secagg.phases import Phase

BOUND_TOLERANCE = 1e-9
LOGGED_REFUSALS = frozenset({"task_mismatch", "cohort_unverified", "not_logged", "unsafe_parameters",
                             "inconsistent_survivors"})
"""Refusals after the device checked its cohort: kept in its transparency log (evidence of a server that broke the
protocol, or of one it could not verify), unlike refusals under its own policy, which leave no row."""


@dataclass
class Contribution:
    parsed: ParsedAssignment
    """The assignment, parsed once (`device_sdk.admission`): what the run computes from."""
    decision: Decision
    ledger: ContributionLedger
    row_id: int
    sent: bool = False

    @property
    def assignment(self) -> Assignment:
        return self.parsed.assignment

    @property
    def min_survivors(self) -> int | None:
        return self.decision.min_survivors

    def check_vector(self, vec: np.ndarray) -> Refusal | None:
        """Refusal when the vector exceeds the sensitivities the server declared (only for kinds that cannot
        bound their vectors from the task, whose noise floor was computed from the declared ones)."""
        bounds = self.decision.declared_bounds
        if bounds is None:
            return None
        l1 = float(np.abs(vec).sum())
        l2 = float(np.linalg.norm(np.asarray(vec, dtype=np.float64)))
        if l1 > bounds[0] * (1 + BOUND_TOLERANCE) or l2 > bounds[1] * (1 + BOUND_TOLERANCE):
            return refuse(self.assignment, "contribution_exceeds_bound",
                          f"the contribution exceeds the declared sensitivities (L1 {bounds[0]:g}, L2 {bounds[1]:g})")
        return None

    def before_send(self, phase: int) -> None:
        """Called before the message of `phase` is posted: from the masked input on, the data has left."""
        if not self.sent and phase >= Phase.MASKED_INPUT:
            self.ledger.mark_sent(self.row_id)
            self.sent = True

    def end(self, finished: bool, contributed: bool | None, detail: str = "",
            refused: str | None = None) -> ContributionRecord | None:
        """Settle the ledger row; the transparency-log record when something was sent, or when the device refused the
        cohort for a reason its user should see (`refused`, one of `LOGGED_REFUSALS`: kept, charging nothing)."""
        if not self.sent:
            if refused in LOGGED_REFUSALS:
                self.ledger.refused(self.row_id, refused, detail)
                return self.ledger.record(self.row_id)
            self.ledger.release(self.row_id)
            return None
        if refused is not None:  # refused after the masked input left (it then revealed nothing): the reason is kept
            detail = f"{refused}: {detail}"
        self.ledger.finish(self.row_id, "finished" if finished else "abandoned", contributed, detail)
        return self.ledger.record(self.row_id)
