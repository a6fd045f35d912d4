"""The scenario registry: seeded, deterministic, extensible."""

from __future__ import annotations

import pytest

from fleet_sim.scenarios import SCENARIOS, generate, scenario


def test_scenarios_are_seeded_and_extensible() -> None:
    assert {"words", "features", "mixed"} <= set(SCENARIOS)
    assert generate("words", 1, 5) == generate("words", 1, 5)
    assert any(generate("words", 1, i) != generate("words", 2, i) for i in range(5))
    rows = generate("features", 0, 0)["features"]
    assert rows and all(18 <= r["age"] <= 90 for r in rows)
    with pytest.raises(ValueError, match="scenario: unknown"):
        generate("nope", 0, 0)

    @scenario("test_only_constant", "constant data")
    def _const(rng, i):  # type: ignore[no-untyped-def]
        return {"words": ["moon"]}

    try:
        assert generate("test_only_constant", 0, 3) == {"words": ["moon"]}
        with pytest.raises(ValueError, match="twice"):
            scenario("test_only_constant", "again")(_const)
    finally:
        del SCENARIOS["test_only_constant"]
