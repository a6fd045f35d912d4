"""The README, pasted as a user would: its shell and Python blocks run in document order in one bash session
against the live server and fleets the blocks themselves start (tests/readme_blocks.py for the markers).

What differs from a person's terminal, all of it here: the session runs in a temporary folder holding a link to
the repository's examples/; `.venv/bin` comes first on PATH; ports 8000 (server) and 8100 (issuer) become free
ports; the server gets the
end-to-end tier's short waits (scripts/devstack.SERVER_ENV) and fails a query whose cohort has not formed within
120 s (instead of 600 s), so a spec that does not fit the README's fleet fails the test quickly; with those short
waits a stopped fleet's check-ins lapse sooner, so the README's pause after `kill $SIM` shrinks to `LAPSE_S`.
`set -euo pipefail`: any failing command fails the test.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from analytics_server.pool import AVAILABILITY_SLACK_S
from devstack.processes import BIN, SERVER_ENV, free_port
from tests.support import deadlines
from tests.readme_blocks import ROOT, blocks, script

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1060)]
TIMEOUT_S = 1000
"""On the reference machine (the tier's three workers on two cores), stretched by the measured slowdown on a busier
machine, as the pytest timeout is. Its cohorts of 200 devices are complete graphs at the devices' safety floor (the
default 15 % dropout allowance; docs/secagg.md), so each phase costs a fleet process 200 × 199 key agreements:
about 615–870 s beside the tier's other modules, 1,030 s beside other work."""
LAPSE_S = float(SERVER_ENV["FA_CHECKIN_MAX_WAIT_S"]) + float(SERVER_ENV["FA_RETRY_AFTER_S"]) + AVAILABILITY_SLACK_S + 3
"""A device stays available for its long-poll (capped by the server), the `retry_after` it was told and the
pool's slack after its last check-in; 3 s more for the check-in lag and the fleet's own exit."""
PAUSE = re.compile(r"^kill \$SIM; sleep (\d+)$", re.M)


def test_readme_blocks_run_against_a_live_server(tmp_path: Path) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    port, issuer_port = free_port(), free_port()
    body = script(blocks(), sys.executable)
    for fixed, free in ((8000, port), (8100, issuer_port)):
        assert f"--port {fixed}" in body and f"127.0.0.1:{fixed}" in body, fixed
        body = body.replace(f"--port {fixed}", f"--port {free}").replace(f"127.0.0.1:{fixed}", f"127.0.0.1:{free}")
    pause = PAUSE.search(body)
    assert pause and int(pause[1]) > LAPSE_S, "the README no longer pauses after stopping its first fleet: update PAUSE"
    body = PAUSE.sub(f"kill $SIM; sleep {LAPSE_S:g}", body)
    full = "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + body
    (tmp_path / "readme.sh").write_text(full)
    env = {**os.environ, **SERVER_ENV, "FA_COHORT_FORMATION_TIMEOUT_S": "120", "PATH": f"{BIN}:{os.environ['PATH']}",
           "PYTHONPATH": str(ROOT)}
    env.pop("FA_TOKEN", None)
    env.pop("FA_SERVER", None)
    limit_s = deadlines.stretch(TIMEOUT_S)
    started = time.monotonic()
    proc = subprocess.Popen(["bash", str(tmp_path / "readme.sh")], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"the README did not finish within {limit_s:.0f} s; stderr:\n{err[-4000:]}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # anything the script left behind
        except ProcessLookupError:
            pass
    took = time.monotonic() - started
    log = (tmp_path / "server.log").read_text() if (tmp_path / "server.log").exists() else ""
    assert proc.returncode == 0, f"README failed (exit {proc.returncode}) after {took:.0f} s\nstdout:\n{out[-3000:]}\nstderr:\n{err[-5000:]}\nserver log:\n{log[-3000:]}"
    assert "Traceback" not in log, log[-5000:]
    # the acceptance check: `fa submit SPEC --wait --format json > out.json` is valid JSON (progress went to stderr)
    view = json.loads((tmp_path / "out.json").read_text())
    assert view["kind"] == "histogram" and view["result"]["counts"], view
    assert view["privacy"]["identities"] == "issuer", view["privacy"]  # the fleet enrolled; nothing registered openly
    issuer_log = (tmp_path / "issuer.log").read_text()
    assert "Traceback" not in issuer_log and "open registration" not in log, issuer_log[-3000:]
    assert "query" in err and "succeeded" in err  # the progress lines were on stderr
    stats = json.loads((tmp_path / "bc_stats.json").read_text())
    assert len(stats["result"]["features"]) == 30
    header = (tmp_path / "feature_stats.csv").read_text().splitlines()[0].split(",")
    assert header[:2] == ["feature", "count"] and {"mean", "mean_ci95_lo", "var", "lower", "upper"} <= set(header)
    assert "[6 0 0 3]" in out  # the secure-aggregation snippet
    print(f"README blocks ran in {took:.0f} s")
