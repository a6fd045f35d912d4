"""A device's numeric rows as the kinds read them: one feature's values, and the cap on how many rows a device uses.

Rows are JSON objects {feature name: value}; a value that is absent, null, boolean, text or not a finite number is
missing (NaN here), never zero. Shared by feature_stats and quantiles (device_sdk/js/src/kinds/rows.ts is the TS port).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def numeric_column(rows: list[Any], name: str) -> np.ndarray:
    """The feature's values over the rows, NaN where missing or not a finite number."""
    out = np.full(len(rows), np.nan)
    for i, row in enumerate(rows):
        value = row.get(name) if isinstance(row, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                out[i] = float(value)
            except OverflowError:  # a JSON integer beyond any float: not a finite number, so missing
                continue
    out[~np.isfinite(out)] = np.nan
    return out


def cap_rows(rows: list[Any], limit: int, rng: np.random.Generator) -> list[Any]:
    """At most `limit` rows: all of them, or `limit` chosen uniformly at random (kept in their order)."""
    if len(rows) <= limit:
        return rows
    return [rows[i] for i in sorted(rng.choice(len(rows), size=limit, replace=False))]
