"""What a release says about its own precision: per released noisy value its noise std and 95 % interval, and
the warnings an analyst must read before using the numbers.

`describe(release)` turns a kind's `Release` into the two JSON objects the server stores and returns beside
the result (`GET /v1/queries/{id}/result`: `uncertainty`, `warnings`) and the in-process runner returns:

- `uncertainty[pointer] = {"std": s, "ci95": [lo, hi]}` for every value in `release.noise_std`: the kind's own
  interval when it gave one (clamped values, ratios, counts released above a threshold — conditional on the
  release, `queries.selective`), else value ± 1.96·s. The noise of the distributed
  mechanisms is a sum of many independent integer shares, so the normal quantile is accurate at the sizes
  where a release is useful; derived values (means, variances) use the delta method.
- `warnings`: the kind's own, then one per value whose interval is wider than the value itself (|hi − lo| >
  |value|) with the kind's advice on what to change — except values the kind marked auxiliary or already
  warned about; at most `MAX_WARNINGS`, then one that counts the rest.
"""

from __future__ import annotations

import math
from typing import Any

from queries.kind import Release, ReleaseWarning

Z95 = 1.959963984540054
"""Two-sided 95 % quantile of the standard normal."""
MAX_WARNINGS = 50
"""Per-value warnings listed before the rest are summarised in one."""


def value_at(doc: Any, path: str) -> Any:
    """The value a JSON Pointer (RFC 6901) points at; KeyError/IndexError when there is none."""
    if path == "":
        return doc
    for token in path.split("/")[1:]:
        key = token.replace("~1", "/").replace("~0", "~")
        doc = doc[int(key)] if isinstance(doc, list) else doc[key]
    return doc


def interval(value: float, std: float, lo: float = -math.inf, hi: float = math.inf) -> tuple[float, float]:
    """value ± 1.96·std, clamped to [lo, hi]."""
    return max(lo, value - Z95 * std), min(hi, value + Z95 * std)


def fmt(x: float) -> str:
    """A number with 4 significant digits, for messages."""
    return f"{x:.4g}"


def _under(path: str, prefixes: tuple[str, ...]) -> bool:
    return any(path == p or path.startswith(p + "/") for p in prefixes)


def describe(release: Release) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """(uncertainty, warnings) of a release, both JSON-ready."""
    uncertainty: dict[str, dict[str, Any]] = {}
    wide: list[ReleaseWarning] = []
    quiet = {w.path for w in release.warnings}
    for path, std in release.noise_std.items():
        try:
            value = value_at(release.result, path)
        except (KeyError, IndexError, TypeError, ValueError):
            continue  # a kind listed a value it did not release: nothing to describe
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(std):
            continue
        lo, hi = release.intervals.get(path) or interval(float(value), float(std))
        uncertainty[path] = {"std": float(std), "ci95": [float(lo), float(hi)]}
        if hi - lo > abs(value) and path not in quiet and not _under(path, release.auxiliary):
            wide.append(ReleaseWarning(path, f"the 95 % interval [{fmt(lo)}, {fmt(hi)}] is wider than the value "
                                             f"{fmt(value)} itself (noise std {fmt(std)}): {release.advice}"))
    warnings = [w.to_dict() for w in release.warnings]
    warnings += [w.to_dict() for w in wide[:MAX_WARNINGS]]
    if len(wide) > MAX_WARNINGS:
        warnings.append({"message": f"{len(wide) - MAX_WARNINGS} more values have a 95 % interval wider than the "
                                    f"value itself (see uncertainty): {release.advice}"})
    return uncertainty, warnings
