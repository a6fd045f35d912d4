"""The embedding examples of docs/device_sdk.md run as written: each is a separate Python process (a fresh app
with its own device.db) joining a cohort of `fa-sim` devices on a real server, for a noisy histogram. Each example
gets its own server: the cohort needs every device there, and a finished example's device stays available for
seconds after it stopped (seated, it would stall the next example's cohort until its phase deadline)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from analyst_client.cli import AnalystClient
from tests.e2e.harness import Fleet, Server

pytestmark = pytest.mark.e2e

DOC = Path(__file__).resolve().parents[2] / "docs" / "device_sdk.md"
FLEET = 4
SPEC = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun", "star"]},
        "privacy": {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6},
        "cohort": {"min_clients": FLEET + 1, "max_clients": FLEET + 1, "phase_timeout_s": 10}}


def examples() -> list[str]:
    """Every python block of the doc's "Embedding" section."""
    text = DOC.read_text()
    section = text.split("## Embedding", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_doc_has_one_example_per_api_style() -> None:
    found = examples()
    assert len(found) == 3
    assert "client.start()" in found[0] and "run_forever" in found[1] and "run_once_sync" in found[2]
    assert all(len(code.strip().splitlines()) <= 30 for code in found)


@pytest.mark.parametrize("index", range(3), ids=["start", "run_forever", "run_once_sync"])
def test_the_embedding_examples_run_against_a_live_server(server: Server, tmp_path: Path, index: int) -> None:
    analyst = AnalystClient(server.url, server.token("admin"))
    fleet = Fleet(server.url, FLEET, tmp_path, scenario="words", checkin_wait=2.0,  # fa-sim devices with a policy too
                  extra=["--policy", json.dumps({"require_noise": True, "max_epsilon_per_day": 5.0, "min_cohort": FLEET + 1})])
    try:
        app = tmp_path / "app"
        app.mkdir()
        (app / "example.py").write_text(examples()[index])
        created = analyst.submit(SPEC)  # needs FLEET + 1 devices: the cohort forms only with the example's
        proc = subprocess.run([sys.executable, "example.py"], cwd=app, capture_output=True, text=True, timeout=180,
                              env={**os.environ, "FA_SERVER": server.url, "PYTHONPATH": str(DOC.parents[1])})
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "never awaited" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        final = analyst.wait(created["id"], timeout_s=60)
        assert final["status"] == "succeeded", final
        assert analyst.result(created["id"])["result"]["clients"] == FLEET + 1
        assert created["id"] in proc.stdout, proc.stdout  # the example prints its transparency log
    finally:
        fleet.stop()
