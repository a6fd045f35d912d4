"""The query kinds the service knows, by name: one line per kind in `KINDS`.

This module imports the kinds; the kinds import only the interface (`queries.kind`), never this module.
"""

from __future__ import annotations

from typing import Any

from queries.feature_stats import FeatureStatsKind
from queries.heavy_hitters import HeavyHittersKind
from queries.histogram import HistogramKind
from queries.kind import QueryKind, QueryKindError
from queries.quantiles import QuantilesKind
from queries.training import TrainingKind

KINDS: tuple[QueryKind[Any, Any], ...] = (
    HistogramKind(),
    FeatureStatsKind(),
    HeavyHittersKind(),
    TrainingKind(),
    QuantilesKind(),
)

_BY_NAME: dict[str, QueryKind[Any, Any]] = {kind.name: kind for kind in KINDS}
if len(_BY_NAME) != len(KINDS):
    raise ValueError("queries.registry: two query kinds share a name")


def get_kind(name: str) -> QueryKind[Any, Any]:
    """The kind called `name`; QueryKindError (naming the known kinds) for an unknown one."""
    try:
        return _BY_NAME[name]
    except KeyError:
        known = ", ".join(sorted(_BY_NAME))
        raise QueryKindError(f"kind: unknown query kind {name!r} (known: {known})") from None
