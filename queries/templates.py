"""Starter specs, one per query kind (each declared by its kind module: `QueryKind.template`), with a note on every field: what `fa init KIND` writes (as JSON with
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

_COMMON = {
    "kind": "the query kind: histogram, feature_stats, heavy_hitters or training",
    "name": "a label for lists and logs (optional)",
    "source": "the collection each device reads from its local store (store.add(SOURCE, value))",
    "privacy": "distributed differential privacy: devices add integer noise before masking",
    "privacy.mechanism": "skellam or discrete_gaussian (noise), or none (exact sums, no DP guarantee)",
    "privacy.epsilon": "the query's total epsilon over all its rounds, charged to the source's budget (1e-6 to 100)",
    "privacy.delta": "the query's delta, charged likewise (at least 1e-30, below 1)",
    "cohort": "who takes part in each secure sum",
    "cohort.min_clients": "fewest devices in any sum (t_min): the noise is calibrated for this many",
    "cohort.max_clients": "most devices seated in one cohort",
    "cohort.phase_timeout_s": "seconds a secure-aggregation phase waits for slow devices (0.1 to 3600)",
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


def _templates() -> dict[str, Template]:
    """Each registered kind's starter spec (`QueryKind.template`), with the common fields' notes where the spec has
    those fields."""
    from queries.registry import KINDS

    out: dict[str, Template] = {}
    for kind in KINDS:
        if kind.template is None:
            continue
        t = kind.template
        notes = _COMMON | t.notes
        out[kind.name] = Template(kind.name, t.title, t.spec, {k: v for k, v in notes.items() if _present(t.spec, k)})
    return out


TEMPLATES: dict[str, Template] = _templates()


def dumps(spec: dict[str, Any]) -> str:
    """A spec as the examples/ files hold it: two-space indent, short objects and lists on one line."""
    return "\n".join(_render(spec, {}, "", 0)) + "\n"


def get_template(kind: str) -> Template:
    try:
        return TEMPLATES[kind]
    except KeyError:
        raise KeyError(f"no template for kind {kind!r}; known: {', '.join(TEMPLATES)}") from None
