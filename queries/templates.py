"""Starter specs, one per query kind, with a note on every field: what `fa init KIND` writes (as JSON with
comments) and what the console's new-query page offers (`GET /v1/templates`).

The histogram, feature_stats and heavy_hitters specs run as they stand against the README's fleet (`fa-sim
--scenario mixed`, 200 devices); the training spec runs on `--scenario breast_cancer_train` (50 devices) once
`params.scaling` holds a feature_stats answer over the same features (unscaled, its raw features diverge).
`examples/` in the repository holds the same specs (a test keeps them equal) and more.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

BREAST_CANCER_FEATURES = [
    "mean_radius", "mean_texture", "mean_perimeter", "mean_area", "mean_smoothness", "mean_compactness",
    "mean_concavity", "mean_concave_points", "mean_symmetry", "mean_fractal_dimension", "radius_error",
    "texture_error", "perimeter_error", "area_error", "smoothness_error", "compactness_error", "concavity_error",
    "concave_points_error", "symmetry_error", "fractal_dimension_error", "worst_radius", "worst_texture",
    "worst_perimeter", "worst_area", "worst_smoothness", "worst_compactness", "worst_concavity",
    "worst_concave_points", "worst_symmetry", "worst_fractal_dimension",
]
"""scikit-learn's breast cancer feature names (spaces as underscores), as `fa-sim --scenario breast_cancer*`
stores them."""

_COMMON = {
    "kind": "the query kind: histogram, feature_stats, heavy_hitters or training",
    "name": "a label for lists and logs (optional)",
    "source": "the collection each device reads from its local store (store.add(SOURCE, value))",
    "privacy": "distributed differential privacy: devices add integer noise before masking",
    "privacy.mechanism": "skellam or discrete_gaussian (noise), or none (exact sums, no DP guarantee)",
    "privacy.epsilon": "the query's total epsilon over all its rounds, charged to the source's budget",
    "privacy.delta": "the query's delta, charged likewise",
    "cohort": "who takes part in each secure sum",
    "cohort.min_clients": "fewest devices in any sum (t_min): the noise is calibrated for this many",
    "cohort.max_clients": "most devices seated in one cohort",
    "cohort.phase_timeout_s": "seconds a secure-aggregation phase waits for slow devices",
}


@dataclass(frozen=True)
class Template:
    kind: str
    title: str
    spec: dict[str, Any]
    notes: dict[str, str] = field(default_factory=dict)

    def text(self) -> str:
        """The spec as JSON with a `//` comment above each noted field (`queries.jsonc.loads` reads it back)."""
        head = [f"// {self.title}", "// Submit: fa submit FILE --wait    Check first: fa validate FILE"]
        return "\n".join(head + _render(self.spec, self.notes, "", 0)) + "\n"


def _render(value: Any, notes: dict[str, str], path: str, indent: int) -> list[str]:
    pad = "  " * indent
    noted = any(k.startswith(f"{path}.") for k in notes) if path else bool(notes)
    if isinstance(value, (dict, list)) and not noted and len(json.dumps(value)) <= 80:
        return [json.dumps(value)]
    if isinstance(value, dict) and value:
        lines = ["{"]
        items = list(value.items())
        for i, (key, item) in enumerate(items):
            sub = f"{path}.{key}" if path else key
            if sub in notes:
                lines.append(f"{pad}  // {notes[sub]}")
            body = _render(item, notes, sub, indent + 1)
            body[0] = f"{pad}  {json.dumps(key)}: {body[0]}"
            if i < len(items) - 1:
                body[-1] += ","
            lines += body
        lines.append(pad + "}")
        return lines
    text = json.dumps(value)
    if isinstance(value, list) and len(text) > 80 and all(not isinstance(x, (dict, list)) for x in value):
        rows, row = [], ""
        for x in value:
            piece = json.dumps(x)
            if row and len(row) + len(piece) > 90:
                rows.append(row.rstrip())
                row = ""
            row += piece + ", "
        rows.append(row.rstrip().rstrip(","))
        return ["["] + [f"{pad}  {r}" for r in rows] + [pad + "]"]
    if isinstance(value, list) and any(isinstance(x, dict) for x in value):
        lines = ["["]
        for i, item in enumerate(value):
            body = _render(item, notes, f"{path}.{i}", indent + 1)
            body[0] = f"{pad}  {body[0]}"
            if i < len(value) - 1:
                body[-1] += ","
            lines += body
        lines.append(pad + "]")
        return lines
    return [text]


def _present(spec: dict[str, Any], path: str) -> bool:
    node: Any = spec
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


TEMPLATES: dict[str, Template] = {
    t.kind: Template(t.kind, t.title, t.spec, {k: v for k, v in t.notes.items() if _present(t.spec, k)})
    for t in [
        Template(
            "histogram",
            "histogram: how many devices hold each value (each device votes for up to "
            "max_contributions_per_device of its values)",
            {
                "kind": "histogram",
                "name": "words typed",
                "source": "words",
                "params": {"buckets": ["moon", "sun", "star", "cloud", "rain"], "other_bucket": "other",
                           "max_contributions_per_device": 2},
                "privacy": {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6},
                "cohort": {"min_clients": 100, "max_clients": 1000, "phase_timeout_s": 30},
            },
            _COMMON | {
                "params.buckets": "the values to count (up to 100,000)",
                "params.other_bucket": "counts every value not in buckets (optional)",
                "params.max_contributions_per_device": "distinct buckets one device may vote for: bounds "
                                                       "its influence, and the noise grows with it",
            },
        ),
        Template(
            "feature_stats",
            "feature_stats: count, mean, variance and a histogram per numeric feature, and a scaler",
            {
                "kind": "feature_stats",
                "name": "scaling of age, income, sessions",
                "source": "features",
                "params": {"features": [{"name": "age", "lower": 18, "upper": 90},
                                        {"name": "income", "lower": 0, "upper": 200000},
                                        {"name": "sessions", "lower": 0, "upper": 20}],
                           "max_examples_per_device": 3, "bins": 4},
                "privacy": {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6},
                "cohort": {"min_clients": 100, "max_clients": 1000, "phase_timeout_s": 30},
            },
            _COMMON | {
                "params.features": "each feature's name in the device rows and public clipping bounds: values "
                                   "outside [lower, upper] are clipped, so the bounds set the noise",
                "params.max_examples_per_device": "rows one device contributes at most (more are sampled)",
                "params.bins": "equal-width histogram bins per feature between lower and upper (optional)",
            },
        ),
        Template(
            "heavy_hitters",
            "heavy_hitters: the most common strings, found without a dictionary (TrieHH hardened with secure "
            "aggregation: every device votes every round)",
            {
                "kind": "heavy_hitters",
                "name": "popular words",
                "source": "words",
                "params": {"mode": "secagg", "max_length": 8, "alphabet": "abcdefghijklmnopqrstuvwxyz",
                           "max_frontier": 16},
                "privacy": {"mechanism": "skellam", "epsilon": 2.0, "delta": 1e-6},
                "cohort": {"min_clients": 100, "max_clients": 1000, "phase_timeout_s": 30},
            },
            _COMMON | {
                "params.mode": "secagg (noisy secure votes, one round per character) or triehh (sampling and "
                               "a threshold, Zhu et al.; no noise)",
                "params.max_length": "longest string found: at most this many rounds",
                "params.alphabet": "characters a string may hold; others end it",
                "params.max_frontier": "most prefixes extended per round (the most voted are kept)",
                "privacy.epsilon": "the query's total epsilon, split over its rounds",
            },
        ),
        Template(
            "training",
            "training: logistic regression on breast cancer over 50 label-skewed devices (FedAvg); pass a "
            "feature_stats result as params.scaling",
            {
                "kind": "training",
                "name": "breast cancer logistic",
                "source": "examples",
                "params": {
                    "model": {"name": "logistic", "n_features": 30, "l2": 0.0025},
                    "features": BREAST_CANCER_FEATURES,
                    "rounds": 10,
                    "client": {"epochs": 1, "batch_size": 0, "lr": 1.0},
                    "server_optimizer": {"name": "fedavg", "lr": 3.0},
                    "clip_norm": 10.0,
                    "eval_every": 5,
                    "holdout_fraction": 0.0,
                },
                "privacy": {"mechanism": "none"},
                "cohort": {"min_clients": 45, "max_clients": 50, "phase_timeout_s": 30},
            },
            _COMMON | {
                "params.model": "logistic, softmax or mlp (numpy), or a registered black-box scoring function",
                "params.features": "feature order of dict rows {x: {name: value}, y: label}",
                "params.rounds": "model updates (evaluation rounds come on top)",
                "params.client": "local training on each device: epochs over its rows, batch size (0: all), "
                                 "learning rate",
                "params.server_optimizer": "fedavg, adam or rprop, applied to the averaged update",
                "params.clip_norm": "L2 bound of one device's update: sets the noise",
                "privacy": "none here: exact sums of the clipped updates. For distributed DP set mechanism "
                           "discrete_gaussian with epsilon and delta, and params.weighting to uniform",
                "params.eval_every": "a federated evaluation round every this many updates (0: none)",
                "params.holdout_fraction": "share of each device's rows kept out of training for evaluation",
            },
        ),
    ]
}


def dumps(spec: dict[str, Any]) -> str:
    """A spec as the examples/ files hold it: two-space indent, short objects and lists on one line."""
    return "\n".join(_render(spec, {}, "", 0)) + "\n"


def get_template(kind: str) -> Template:
    try:
        return TEMPLATES[kind]
    except KeyError:
        raise KeyError(f"no template for kind {kind!r}; known: {', '.join(TEMPLATES)}") from None
