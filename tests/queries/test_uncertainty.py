"""`queries.uncertainty.describe`: per-value std and 95 % interval, and the warnings a release carries."""

from __future__ import annotations

import pytest

from queries.kind import Release, ReleaseWarning
from queries.uncertainty import MAX_WARNINGS, Z95, describe, value_at


def test_intervals_default_to_the_normal_quantile_and_respect_the_kinds_own() -> None:
    release = Release({"a": {"x/y": 10.0}, "n": [3, 40]},
                      noise_std={"/a/x~1y": 2.0, "/n/1": 5.0, "/n/0": 1.0, "/missing": 1.0},
                      intervals={"/n/0": (0.0, 5.0)})
    values, warnings = describe(release)
    assert value_at(release.result, "/a/x~1y") == 10.0
    assert values["/a/x~1y"] == {"std": 2.0, "ci95": [pytest.approx(10 - 2 * Z95), pytest.approx(10 + 2 * Z95)]}
    assert values["/n/0"]["ci95"] == [0.0, 5.0]
    assert "/missing" not in values  # a kind listing a value it did not release is ignored
    assert [w["path"] for w in warnings] == ["/n/0"]  # 5 wide around 3; 40 ± 9.8 is narrower than 40
    assert "wider than the value 3" in warnings[0]["message"] and release.advice in warnings[0]["message"]


def test_kind_warnings_come_first_and_auxiliary_or_already_warned_values_stay_quiet() -> None:
    result = {"v": [1.0] * (MAX_WARNINGS + 5), "aux": {"c": 1.0}, "w": 1.0}
    std = {f"/v/{i}": 10.0 for i in range(MAX_WARNINGS + 5)} | {"/aux/c": 10.0, "/w": 10.0}
    release = Release(result, noise_std=std, warnings=[ReleaseWarning("/w", "floored"), ReleaseWarning(None, "whole")],
                      auxiliary=("/aux",))
    values, warnings = describe(release)
    assert set(values) == set(std)
    assert warnings[0] == {"path": "/w", "message": "floored"} and warnings[1] == {"message": "whole"}
    paths = [w.get("path") for w in warnings]
    assert "/aux/c" not in paths and paths.count("/w") == 1
    assert len(warnings) == 2 + MAX_WARNINGS + 1 and "5 more values" in warnings[-1]["message"]
