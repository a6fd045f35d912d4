"""What the transparency log records, and each leaf's bytes.

A leaf is the RFC 8785 (JCS) canonical UTF-8 JSON of one entry object; its hash is RFC 9162's leaf hash of
those bytes. Every entry has `type` and `at` (Unix milliseconds when the server appended it):

- `query`    — a query was accepted: `query_id`, `source`, `kind`, its canonical `spec` and `spec_digest`;
- `task`     — a cohort was formed: `query_id`, `round`, `cohort_id`, `task_digest` (hex; what every member
               binds into its keys, `queries.task_digest`) and `secagg`: the parameters that protect its members
               (`n`, `degree`, `threshold`, `threat_model`, `graph_seed`: the rule that seeds the neighbour graph),
               which every member checks against its own config and `fa audit` against the safety floor;
- `charge`   — a query's (ε, δ) was charged to its source: `query_id`, `source`, `epsilon`, `delta`; a charge
               for one more run of the query (its devices' data may enter a second sum of a round after a
               cohort's sum failed its opening check; docs/validation.md) also has `layer` (2, 3, …: the runs
               charged so far) and `cohort_id` (the failed cohort that needed it), with the first charge's amounts;
- `refund`   — that charge was returned (the query ended before any sum could be seen);
- `budget`   — a source's total was set (`source` "*" is the server's default for sources without one);
- `release`  — a query ended with a readable result: `query_id`, `status`, `result_digest`, its `privacy`
               block (both as the result route serves them: NaN and ±inf as null).

Digests are SHA-256 of the JCS bytes of the JSON value, in hex.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Literal

import pydantic_core

from fa_common.canonical import NotCanonical, canonical_json
from translog.merkle import leaf_hash

EntryType = Literal["query", "task", "charge", "refund", "budget", "release"]
ENTRY_TYPES: tuple[str, ...] = EntryType.__args__  # type: ignore[attr-defined]
DEFAULT_SOURCE = "*"
"""The `budget` entry's source for the server's default total."""


class EntryError(ValueError):
    """A value that has no canonical JSON (a number beyond ±(2^53 − 1), NaN, a non-JSON type)."""


def canonical(value: Any) -> bytes:
    """The entry's RFC 8785 bytes (fa_common.canonical); EntryError when it has none."""
    try:
        return canonical_json(value, "entry")
    except NotCanonical as exc:
        raise EntryError(str(exc)) from None


def digest(value: Any) -> str:
    """Hex SHA-256 of a JSON value's canonical bytes."""
    return hashlib.sha256(canonical(value)).hexdigest()


def entry_leaf_hash(entry: Mapping[str, Any]) -> bytes:
    return leaf_hash(canonical(dict(entry)))


def query_entry(query_id: str, source: str, kind: str, spec: Mapping[str, Any], at: int) -> dict[str, Any]:
    return {"type": "query", "at": at, "query_id": query_id, "source": source, "kind": kind,
            "spec": dict(spec), "spec_digest": digest(dict(spec))}


def task_entry(query_id: str, round: int, cohort_id: str, task_digest: bytes, at: int,
               secagg: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "task", "at": at, "query_id": query_id, "round": round, "cohort_id": cohort_id,
            "task_digest": task_digest.hex(), "secagg": dict(secagg)}


def charge_entry(query_id: str, source: str, epsilon: float, delta: float, at: int, refund: bool = False,
                 layer: int = 1, cohort_id: str | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "refund" if refund else "charge", "at": at, "query_id": query_id, "source": source,
             "epsilon": float(epsilon), "delta": float(delta)}
    if layer > 1:
        entry.update(layer=layer, cohort_id=cohort_id)
    return entry


def budget_entry(source: str, total_epsilon: float, total_delta: float, at: int) -> dict[str, Any]:
    return {"type": "budget", "at": at, "source": source, "total_epsilon": float(total_epsilon),
            "total_delta": float(total_delta)}


def as_served(value: Any) -> Any:
    """A value as a JSON API serves it (pydantic's encoder: NaN and ±inf become null, keys strings, tuples lists):
    what an auditor reading the result route gets back, so its digest matches the release entry's."""
    return json.loads(pydantic_core.to_json(value, inf_nan_mode="null"))


def release_entry(query_id: str, status: str, result: Any, privacy: Mapping[str, Any] | None, at: int) -> dict[str, Any]:
    return {"type": "release", "at": at, "query_id": query_id, "status": status,
            "result_digest": digest(as_served(result)), "privacy": as_served(privacy)}


__all__ = ["DEFAULT_SOURCE", "ENTRY_TYPES", "EntryError", "EntryType", "budget_entry", "canonical", "charge_entry",
           "as_served", "digest", "entry_leaf_hash", "query_entry", "release_entry", "task_entry"]
