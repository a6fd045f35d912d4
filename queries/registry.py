"""The query kinds the service knows: importing a kind's module registers it (one line per kind)."""

import queries.feature_stats  # noqa: F401
import queries.heavy_hitters  # noqa: F401
import queries.histogram  # noqa: F401
import queries.training  # noqa: F401
