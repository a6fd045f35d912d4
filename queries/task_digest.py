"""The task digest: what one device was asked to compute in one cohort, hashed the same way by every party.

Every device hashes its own assignment and binds the digest into its secure-aggregation keys and signatures
(`secagg.crypto.binding`), so a server that shows two members of a cohort different tasks — another query spec,
round, task (a histogram's buckets, a training round's model), privacy block, noise or secagg configuration (n,
threshold, graph, bit width) — gets masks that do not cancel *and* signatures that do not verify: the devices
refuse before any input is sent (docs/secagg.md, "Devices that check the server").

    digest = SHA-256("fa-task-digest/v1\\n" ‖ JCS(view))

`view` is the JSON object of the assignment's members named in `DIGEST_FIELDS` whose value is present and not
null, taken as the device received them; JCS is the JSON Canonicalization Scheme of RFC 8785 (members sorted by
UTF-16 code units, numbers as IEEE-754 doubles in ECMAScript's shortest form, minimal string escapes, UTF-8).
Integers beyond ±(2^53 − 1) are refused: two languages could read them differently. The per-device fields
(`party_id`, `server_url`, `first_phase`, `phase_timeout_s`) are left out; `cohort_id` is the
session id, which the binding carries anyway. Known-answer vectors: tests/vectors/task_digest.json.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from fa_common.canonical import NotCanonical, canonical_json

DOMAIN = b"fa-task-digest/v1\n"
DIGEST_FIELDS = (
    "spec", "query_id", "round", "kind", "source", "task", "secagg", "threat_model", "noise", "validation",
    "privacy",
)
"""The assignment members the digest covers: everything that shapes what a device computes and how it is protected."""


class TaskDigestError(NotCanonical):
    """An assignment whose digest view cannot be canonicalised (a number outside the interoperable range, a value
    that is not JSON); the message names the member."""


def digest_view(assignment: Mapping[str, Any]) -> dict[str, Any]:
    """The members of a wire assignment (its JSON object) that the digest covers."""
    return {k: assignment[k] for k in DIGEST_FIELDS if assignment.get(k) is not None}


def task_digest(assignment: Any) -> bytes:
    """The 32-byte digest of an assignment: a `queries.envelope.Assignment` or its wire JSON object."""
    if hasattr(assignment, "model_dump"):
        assignment = assignment.model_dump(mode="json", exclude_none=True)
    view = digest_view(assignment)
    try:
        text = canonical_json(view, "assignment")
    except NotCanonical as whole:
        for name, value in view.items():
            try:
                canonical_json(value, name)
            except NotCanonical as member:  # name the member at fault
                raise TaskDigestError(str(member)) from None
        raise TaskDigestError(str(whole)) from None
    return hashlib.sha256(DOMAIN + text).digest()


__all__ = ["DIGEST_FIELDS", "DOMAIN", "TaskDigestError", "digest_view", "task_digest"]
