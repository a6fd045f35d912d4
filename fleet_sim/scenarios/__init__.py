"""Synthetic local data for simulated devices (`fa-sim`, tests, demos): the scenario registry and one
module per data family, each registering its scenarios when imported.

- `registry` — `scenario`, `generate`, `SCENARIOS`;
- `synthetic` — words, features, startup_times, mixed (hand-made distributions);
- `datasets` — breast_cancer, breast_cancer_train, breast_cancer_patient, digits (scikit-learn's data sets, label-skewed shards);
- `words` — zipf_words, planted (pseudo-words for heavy hitters);
- `urlbar` — frecency (simulated browser histories).

Family modules import only `registry` (and each other, acyclically), so any of them can be imported
first; importing the package registers every family.
"""

from fleet_sim.scenarios import datasets, synthetic, urlbar, words  # noqa: F401  (register the scenarios)
from fleet_sim.scenarios.registry import SCENARIOS, Rows, ScenarioFn, generate, scenario

__all__ = ["SCENARIOS", "Rows", "ScenarioFn", "generate", "scenario"]
