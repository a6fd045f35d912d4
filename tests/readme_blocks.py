"""The README's fenced code blocks and their markers (used by tests/test_examples.py and tests/e2e/test_readme.py).

A marker is an HTML comment on the line right before a fence:

- `<!-- readme: skip (REASON) -->` — an illustrative block the README test does not run (`make demo`, say); the
  reason is required;
- `<!-- readme: file PATH -->` — a JSON block that must equal the repository file PATH (examples/…).

Every ```json block carries one of the two; every ```sh and ```python block runs unless it is skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
_FENCE = re.compile(r"^```(?P<lang>[\w-]*)\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
_MARKER = re.compile(r"<!--\s*readme:\s*(?P<verb>skip|file)\s*(?P<arg>.*?)\s*-->")


@dataclass(frozen=True)
class Block:
    lang: str
    body: str
    line: int
    marker: str | None
    """"skip", "file" or None"""
    arg: str


def blocks(path: Path = README) -> list[Block]:
    text = path.read_text()
    out = []
    for m in _FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mk = _MARKER.search(before)
        out.append(Block(m["lang"], m["body"], line, mk["verb"] if mk else None, mk["arg"] if mk else ""))
    return out


def script(items: list[Block], python: str) -> str:
    """The README's runnable blocks as one bash script: shell blocks as they are, Python blocks through `python`."""
    parts = []
    for b in items:
        if b.marker == "skip" or b.lang not in ("sh", "bash", "python"):
            continue
        parts.append(f"# --- README.md line {b.line} ---")
        if b.lang == "python":
            parts.append(f"{python} - <<'README_PYTHON'\n{b.body}README_PYTHON")
        else:
            parts.append(b.body.rstrip("\n"))
    return "\n".join(parts) + "\n"
