"""examples/ and the README's markers: every example spec is valid, the starter templates equal their examples,
every JSON block of the README equals the file it names, and every skipped block says why."""

from __future__ import annotations

import json

import pytest

from queries import jsonc
from queries.registry import KINDS, get_kind
from queries.spec import QuerySpec
from queries.templates import TEMPLATES, dumps
from tests.readme_blocks import ROOT, blocks

EXAMPLES = sorted((ROOT / "examples").glob("*.json"))


def test_every_kind_with_a_template_is_offered_and_the_built_in_kinds_have_examples() -> None:
    assert set(TEMPLATES) == {k.name for k in KINDS if k.template is not None}
    kinds = {json.loads(p.read_text())["kind"] for p in EXAMPLES}  # documentation: optional for a new kind
    assert {"histogram", "feature_stats", "heavy_hitters", "training"} <= kinds


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_is_a_valid_spec(path) -> None:  # type: ignore[no-untyped-def]
    spec = json.loads(path.read_text())
    parsed = QuerySpec.model_validate(spec)
    get_kind(parsed.kind).parse_params(parsed.params)
    assert path.read_text() == dumps(spec), f"{path.name}: format it with queries.templates.dumps"


@pytest.mark.parametrize("kind", sorted(TEMPLATES))
def test_template_text_parses_back_and_equals_its_example(kind: str) -> None:
    t = TEMPLATES[kind]
    assert jsonc.loads(t.text()) == t.spec
    QuerySpec.model_validate(t.spec)
    get_kind(kind).parse_params(t.spec["params"])
    example = ROOT / "examples" / f"{kind}.json"
    if example.exists():  # examples/ are documentation: a kind may have none
        assert json.loads(example.read_text()) == t.spec
    for path in t.notes:  # every note names a field of the spec
        node = t.spec
        for part in path.split("."):
            assert isinstance(node, dict) and part in node, f"{kind}: note on missing field {path}"
            node = node[part]


def test_readme_markers() -> None:
    found = blocks()
    assert found, "no code blocks found in README.md"
    for b in found:
        if b.marker == "skip":
            assert b.arg.startswith("(") and len(b.arg) > 4, f"README.md line {b.line}: a skipped block needs a (reason)"
        if b.lang == "json":
            assert b.marker in ("file", "skip"), f"README.md line {b.line}: a JSON block names its file or is skipped"
        if b.marker == "file":
            assert b.lang == "json", f"README.md line {b.line}: only JSON blocks name a file"
            assert json.loads(b.body) == json.loads((ROOT / b.arg).read_text()), f"README.md line {b.line} ≠ {b.arg}"
    assert sum(1 for b in found if b.marker == "skip") <= 2, "the README test should run nearly every block"
    assert any(b.lang == "python" and b.marker is None for b in found)
