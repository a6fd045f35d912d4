"""`make demo`: the product end to end on this machine.

Runs the in-process secure-aggregation demo, then (once the server exists) the server demo: a server on
SQLite, a simulated fleet and a query of each available kind.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    steps = [[sys.executable, "-m", "secagg.demo"]]
    if (ROOT / "scripts" / "demo_server.py").exists():
        steps.append([sys.executable, "-m", "scripts.demo_server"])
    for cmd in steps:
        print(f"\n$ {' '.join(Path(c).name if i == 0 else c for i, c in enumerate(cmd))}\n", flush=True)
        code = subprocess.call(cmd, cwd=ROOT)
        if code:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
