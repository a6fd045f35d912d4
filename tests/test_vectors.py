"""The frozen known-answer vectors in tests/vectors/ (format: docs/vectors.md).

Each file must be byte-identical to what `scripts/make_vectors.py` computes from the code now, and each
case's output must follow from its recorded input alone — the way a port in another language uses them.
A failure here means the protocol changed: fix the code, or bump the version and regenerate.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VECTORS = ROOT / "tests" / "vectors"
_spec = importlib.util.spec_from_file_location("make_vectors", ROOT / "scripts" / "make_vectors.py")
assert _spec is not None and _spec.loader is not None
make_vectors = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("make_vectors", make_vectors)
_spec.loader.exec_module(make_vectors)
TOPICS = sorted(make_vectors.TOPICS)


def test_every_topic_has_a_file_and_every_file_a_topic():
    assert sorted(p.stem for p in VECTORS.glob("*.json")) == TOPICS
    assert {"randomness", "noise", "key_agreement", "prg", "share_encryption", "shamir", "messages",
            "transcript", "request_signing", "validity"} <= set(TOPICS)


@pytest.mark.parametrize("name", TOPICS)
def test_file_is_byte_identical_to_the_recomputed_vectors(name):
    assert (VECTORS / f"{name}.json").read_bytes() == make_vectors.render(name).encode("utf-8")


@pytest.mark.parametrize("name", TOPICS)
def test_each_output_follows_from_its_recorded_input(name):
    doc = json.loads((VECTORS / f"{name}.json").read_text(encoding="utf-8"))
    assert doc["topic"] == name and doc["versions"] == make_vectors.versions() and doc["cases"]
    compute = make_vectors.TOPICS[name].compute
    for case in doc["cases"]:
        assert json.loads(json.dumps(compute(case["input"]))) == case["output"]


def test_the_generator_is_deterministic():
    assert all(make_vectors.render(n) == make_vectors.render(n) for n in TOPICS)
