"""Public parameters of one secure-aggregation session (one cohort), and how defaults are derived.

Thresholds are per closed neighbourhood of size m (m = n for the complete graph, k + 1 for SecAgg+). The degree
defaults to `secagg.floor.plan(n)`: the least degree at or above the safety floor a device computes (corrupt
fraction ⅓, 2^-40 with 40 bits of grinding) whose safe threshold survives the default dropout (the complete graph
when no sparse degree does). The threshold defaults to the floor's least safe threshold at that degree in the active
model, and to ⌊m/2⌋ + 1 in the semi-honest model (a benchmark-only variant: devices refuse it). A threshold above m/2
is required in both: an honest party reveals at most one share per peer, so a server cannot gather a threshold of
self-mask shares and a threshold of key shares for the same peer.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Any, Literal

import numpy as np

from secagg import floor
from secagg.errors import ConfigError
from secagg.graph import NeighbourGraph

GraphKind = Literal["auto", "complete", "sparse"]
ThreatModel = Literal["semi_honest", "active"]
SESSION_ID_BYTES = 16
MAX_BITS = 62
MAX_PARTIES = 1 << 20
MAX_DIM = 1 << 26
GRAPH_SEED_RULE = "members_root/v1"
"""How the neighbour graph is seeded: `crypto.graph_seed(binding, members root)`, the members root over every member's
party, identity and advertised keys as phase 0 closed — no value the server picks alone (docs/secagg.md)."""


@dataclass(frozen=True)
class SecAggConfig:
    session_id: bytes
    n: int
    dim: int
    bits: int
    graph: GraphKind = "auto"
    threat_model: ThreatModel = "semi_honest"
    threshold: int | None = None
    min_survivors: int | None = None
    degree: int | None = None
    max_input: int | None = None
    """If given, the largest value one party's vector entry may take; n·max_input must not wrap."""

    def __post_init__(self) -> None:
        if not isinstance(self.session_id, bytes) or len(self.session_id) != SESSION_ID_BYTES:
            raise ConfigError(f"session_id: must be {SESSION_ID_BYTES} bytes")
        if not isinstance(self.n, int) or not 2 <= self.n <= MAX_PARTIES:
            raise ConfigError(f"n: must be an integer between 2 and {MAX_PARTIES}, got {self.n!r}")
        if not isinstance(self.dim, int) or not 1 <= self.dim <= MAX_DIM:
            raise ConfigError(f"dim: must be an integer between 1 and {MAX_DIM}, got {self.dim!r}")
        if not isinstance(self.bits, int) or not 1 <= self.bits <= MAX_BITS:
            raise ConfigError(f"bits: must be an integer between 1 and {MAX_BITS}, got {self.bits!r}")
        if self.graph not in ("auto", "complete", "sparse"):
            raise ConfigError(f"graph: must be auto, complete or sparse, got {self.graph!r}")
        if self.threat_model not in ("semi_honest", "active"):
            raise ConfigError(f"threat_model: must be semi_honest or active, got {self.threat_model!r}")
        if self.degree is not None and (self.degree < 2 or self.degree % 2):
            raise ConfigError(f"degree: must be an even number ≥ 2, got {self.degree!r}")
        m = self.neighbourhood_size
        t = self.share_threshold
        if not m // 2 < t <= m:
            raise ConfigError(
                f"threshold: must be above half the neighbourhood size ({m}) and at most {m}, got {t}"
            )
        if not 1 <= self.survivor_threshold <= self.n:
            raise ConfigError(f"min_survivors: must be between 1 and n={self.n}, got {self.min_survivors}")
        if self.max_input is not None and self.n * self.max_input >= 1 << self.bits:
            raise ConfigError(
                f"bits: {self.n} parties × max_input {self.max_input} can wrap modulo 2^{self.bits}; "
                f"need at least {(self.n * self.max_input).bit_length()} bits"
            )

    @property
    def uses_complete_graph(self) -> bool:
        return self.resolved_degree >= self.n - 1

    @cached_property
    def resolved_degree(self) -> int:
        if self.graph == "complete":
            return self.n - 1
        if self.degree is not None:
            return min(self.n - 1, self.degree)
        return floor.plan(self.n).degree

    @property
    def neighbourhood_size(self) -> int:
        return self.resolved_degree + 1

    @property
    def share_threshold(self) -> int:
        if self.threshold is not None:
            return self.threshold
        m = self.neighbourhood_size
        if self.threat_model == "active":
            return floor.threshold_floor(self.n, self.resolved_degree) or m
        return m // 2 + 1

    @property
    def survivor_threshold(self) -> int:
        return self.min_survivors if self.min_survivors is not None else self.share_threshold

    @property
    def active(self) -> bool:
        return self.threat_model == "active"

    @property
    def modulus_mask(self) -> int:
        return (1 << self.bits) - 1

    @property
    def work_dtype(self) -> np.dtype:
        """uint32 when 2^bits divides 2^32 (half the keystream), else uint64."""
        return np.dtype(np.uint32) if self.bits <= 32 else np.dtype(np.uint64)

    def neighbour_graph(self, seed: bytes) -> NeighbourGraph:
        """The graph drawn from `seed` (`secagg.crypto.graph_seed`: known once phase 0 closed)."""
        degree = None if self.uses_complete_graph else self.resolved_degree
        return NeighbourGraph(self.n, degree, seed)

    def public_summary(self) -> dict[str, Any]:
        """What the transparency log's task entry records of the cohort (`translog.entries.task_entry`): n, the resolved
        degree and threshold, the threat model and how the graph is seeded; a device checks it against its own config,
        `fa audit` against the floor (`secagg.floor`)."""
        return {"n": self.n, "degree": self.resolved_degree, "threshold": self.share_threshold,
                "threat_model": self.threat_model, "graph_seed": GRAPH_SEED_RULE}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["session_id"] = self.session_id.hex()
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SecAggConfig:
        try:
            fields = dict(data)
            fields["session_id"] = bytes.fromhex(fields["session_id"])
            return cls(**fields)
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, ConfigError):
                raise
            raise ConfigError(f"invalid secagg config: {exc}") from None
