"""The project's mypy configuration catches a type error and accepts correct code.

Runs mypy with `pyproject.toml`'s `[tool.mypy]` settings on one tiny temporary module each (not the whole
tree: that is `.venv/bin/mypy` / CI), so a configuration that stopped reporting errors — a global
`ignore_errors`, a broken plugin line — fails here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "pyproject.toml"


def _mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    module = tmp_path / "checked_module.py"
    module.write_text(source)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(CONFIG), "--no-incremental",
         "--cache-dir", str(tmp_path / "mypy_cache"), str(module)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )


def test_mypy_reports_a_type_error(tmp_path: Path) -> None:
    out = _mypy(tmp_path, 'def double(x: int) -> int:\n    return x * 2\n\n\ndouble("two")\n')
    assert out.returncode == 1, out.stdout + out.stderr
    assert 'Argument 1 to "double" has incompatible type "str"; expected "int"' in out.stdout
    assert "[arg-type]" in out.stdout


def test_mypy_accepts_a_correct_module(tmp_path: Path) -> None:
    out = _mypy(tmp_path, 'def double(x: int) -> int:\n    return x * 2\n\n\ndouble(2)\n')
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Success: no issues found in 1 source file" in out.stdout
