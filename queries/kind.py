"""The interface every query kind implements, and the registry that maps `kind` names to kinds.

A query is planned as rounds. In each round the server hands devices a task payload; every device turns
its local data into a bounded integer vector (`contribute`); the vectors are summed under secure
aggregation (with distributed noise when the query asks for it); the kind decodes the round's aggregate
into its state and plans the next round or finishes. In VDAF terms: `contribute` is the client shard,
the secure sum is the aggregate, `decode_round`/`finalize` is the unshard.

Adding a kind touches its own module and one registry line (`register`), nothing in the server or SDK.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel


class QueryKindError(ValueError):
    """A query spec or task payload that a kind cannot accept; the message names the field."""


@dataclass(frozen=True)
class RoundPlan:
    """What the server needs to run one round and what devices need to contribute to it."""

    round: int
    task: dict[str, Any]
    """JSON payload sent to every device of the round (buckets, trie frontier, model weights…)."""
    dim: int
    """Length of the integer vector each device contributes."""
    max_abs: int
    """Bound on |entry| of one device's encoded vector before noise (sizes the secagg modulus)."""
    l1_sensitivity: float
    """Largest L1 norm of one device's encoded vector (what DP calibration protects)."""
    l2_sensitivity: float
    """Largest L2 norm of one device's encoded vector."""
    sample_rate: float = 1.0
    """Fraction of checked-in devices that take part (Bernoulli sampling, e.g. TrieHH's γ)."""
    min_clients: int | None = None
    """Overrides the query's cohort.min_clients for this round when set."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Kind-private information kept with the round (stored; passed back to decode_round)."""


class QueryKind(ABC):
    """One kind of query. Instances are stateless; all state lives in the JSON `state` dict."""

    name: ClassVar[str]
    Params: ClassVar[type[BaseModel]]

    def parse_params(self, raw: dict[str, Any]) -> BaseModel:
        """Validate `params`; raises pydantic.ValidationError naming the bad field."""
        return self.Params.model_validate(raw)

    def rounds_upper_bound(self, params: BaseModel) -> int:
        """How many rounds the query can run at most; DP composes its cost over these."""
        return 1

    def bind_privacy(self, raw_params: dict[str, Any], privacy: Any) -> dict[str, Any]:
        """Optional hook, called at submit before `parse_params`: copy what the kind needs from the spec's
        `privacy` block (a `queries.spec.PrivacySpec`) into its raw params, or refuse a combination it
        cannot honour (raise QueryKindError naming the field). The returned params are what is stored.
        Default: params unchanged (the server's distributed noise is the kind's only privacy)."""
        return raw_params

    def privacy(self, params: BaseModel) -> dict[str, Any] | None:
        """Optional hook: the kind's own privacy block (e.g. TrieHH's sample-and-threshold guarantee), merged
        over the server's block in the released result; the server also accepts mechanism "none" in the
        production profile when this block carries a finite epsilon. Default None (server's block only)."""
        return None

    @abstractmethod
    def initial_state(self, params: BaseModel) -> dict[str, Any]:
        """JSON-serialisable state before the first round."""

    @abstractmethod
    def plan_round(self, params: BaseModel, state: dict[str, Any], round_index: int) -> RoundPlan | None:
        """The next round, or None when the query is finished."""

    @abstractmethod
    def contribute(self, task: dict[str, Any], rows: list[Any]) -> np.ndarray:
        """Device side: the local rows of the query's `source` → an int64 vector of length plan.dim."""

    @abstractmethod
    def decode_round(
        self,
        params: BaseModel,
        state: dict[str, Any],
        plan: RoundPlan,
        aggregate: np.ndarray,
        contributors: int,
    ) -> dict[str, Any]:
        """Server side: the round's (noised) int64 sum over `contributors` devices → the new state."""

    @abstractmethod
    def finalize(self, params: BaseModel, state: dict[str, Any]) -> dict[str, Any]:
        """The released `result` object of a finished query."""


_REGISTRY: dict[str, QueryKind] = {}


def register(kind: QueryKind) -> QueryKind:
    if kind.name in _REGISTRY:
        raise ValueError(f"query kind {kind.name!r} registered twice")
    _REGISTRY[kind.name] = kind
    return kind


def get_kind(name: str) -> QueryKind:
    from queries import registry  # noqa: F401  (populates the registry on first use)

    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise QueryKindError(f"kind: unknown query kind {name!r} (known: {known})") from None


def known_kinds() -> list[str]:
    from queries import registry  # noqa: F401

    return sorted(_REGISTRY)
