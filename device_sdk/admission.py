"""An assignment parsed once, before the device's policy looks at it: `parse_assignment(a)` → `ParsedAssignment`.

Everything the device reads out of an assignment's JSON is parsed here and nowhere else: the query kind, the kind's
typed round task (`kind.parse_task`, the kind's one set of task rules), the secure-aggregation configuration
(`SecAggConfig.from_dict`), the task digest the device binds into its keys and proofs (`queries.task_digest`) and,
when the cohort validates inputs, the kind's validity statement for the task. The policy (`device_sdk.policy.decide`),
the transparency-log check, the contribution, its validity proof and the secure-aggregation session all take the
`ParsedAssignment` and never parse again. An assignment that does not parse is refused (`invalid_assignment`) before
any data is read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from device_sdk.policy import Refusal, refuse
from queries.envelope import Assignment
from queries.kind import DeviceKind, QueryKindError
from queries.registry import get_kind
from queries.task_digest import TaskDigestError, task_digest
from secagg.config import SecAggConfig
from secagg.errors import ConfigError
from secagg.validity.statement import Statement


@dataclass(frozen=True)
class ParsedAssignment:
    """One assignment, parsed once (module docstring)."""

    assignment: Assignment
    kind: DeviceKind[Any]
    task: Any
    """The kind's typed round task (`kind.Task`), as `kind.parse_task` returned it."""
    secagg: SecAggConfig
    digest: bytes
    """The task digest (`queries.task_digest`) the device computed itself."""
    statement: Statement | None
    """The kind's validity statement for the task when the cohort validates inputs (`assignment.validation`), else
    None (also when the kind has none for this task: the device then cannot take part, `device_sdk.validity`)."""


def parse_assignment(a: Assignment) -> ParsedAssignment | Refusal:
    """The assignment parsed (module docstring), or the `invalid_assignment` refusal naming what does not parse."""
    try:
        kind: DeviceKind[Any] = get_kind(a.kind)
    except ValueError as exc:
        return refuse(a, "invalid_assignment", str(exc))
    try:
        cfg = SecAggConfig.from_dict(a.secagg)
    except ConfigError as exc:
        return refuse(a, "invalid_assignment", f"secagg: {exc}")
    try:
        task = kind.parse_task(a.task)
        statement = kind.validity(task) if a.validation is not None else None
    except QueryKindError as exc:
        return refuse(a, "invalid_assignment", str(exc))
    try:
        digest = task_digest(a)
    except TaskDigestError as exc:
        return refuse(a, "invalid_assignment", f"task digest: {exc}")
    return ParsedAssignment(a, kind, task, cfg, digest, statement)


__all__ = ["ParsedAssignment", "parse_assignment"]
