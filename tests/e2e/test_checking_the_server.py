"""Acceptance: devices that check the server, against a real server process an attacker changed
(tests/e2e/malicious_server.py) and real `fa-sim` devices.

The malicious server shows one member of each cohort something its peers are not shown — another histogram task
(decoy buckets), another training model (Pasquini et al.'s model inconsistency), another cohort size n — and does
not check signatures itself. Every device binds the task digest of what it was shown into its keys and signatures
and checks that its senders' shares open under the channel bound to its own digest before its masked input leaves, so:
- the query fails naming `task_mismatch` and releases nothing (its result is 409; no round has a contributor);
- the only cohort aborted, none finished (its stored events), its reason names the refusals;
- /metrics counts the refusals by reason, and the devices' own logs say why they refused;
- the server log proves the attack ran;
- its transparency log shows the cohort's two tasks (`fa audit`: task_conflict). An attacker that logs only the
  cohort's task is refused earlier, by the victim alone (`not_logged`).
The control: the same histogram on an honest `fa-server` with the same fleet is exact.
"""

from __future__ import annotations

import json
import os
import re
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from analyst_client.audit import audit_log
from analyst_client.client import ApiError
from analyst_client.cli import AnalystClient
from tests.e2e.harness import Fleet, Server, check_exact, fresh_database

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
N = 20
COHORT = {"min_clients": N, "max_clients": N, "phase_timeout_s": 15}
"""Every device of the fleet in the one cohort (no margin: the honest control must seat all of them). Phases close
as soon as every member answered (or refused); the deadline only bounds a straggler on a loaded machine."""
WAIT_S = 180

HISTOGRAM = {
    "kind": "histogram",
    "name": "checking the server",
    "source": "words",
    "params": {"buckets": ["moon", "sun", "star", "cloud", "rain", "snow", "river"], "other_bucket": "other",
               "max_contributions_per_device": 2},
    "privacy": {"mechanism": "none"},
    "cohort": COHORT,
}


def training_spec() -> dict[str, Any]:
    """examples/training.json cut to one training round (no evaluation round first: round 0 trains, so its
    task carries the model's weights)."""
    spec = json.loads((EXAMPLES / "training.json").read_text())
    spec["params"] |= {"rounds": 1, "eval_every": 0}
    return spec | {"privacy": {"mechanism": "none"}, "cohort": COHORT}


@contextmanager
def server_process(tmp: Path, evil: str | None, log_both: bool = True) -> Iterator[Server]:
    """A server on a fresh SQLite file: the honest `fa-server`, or (`evil`) the malicious one showing one member
    of each cohort another task, model or n, where a query fails after its first aborted cohort (the honest one
    keeps the default: a cohort a loaded machine lets time out is formed again). The log must hold no traceback."""
    url = f"sqlite+aiosqlite:///{tmp / 'fa.db'}"
    fresh_database(url)
    env: dict[str, str] = {}
    command = None
    if evil is not None:
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        env |= {"FA_EVIL": evil, "PYTHONPATH": path, "FA_MAX_CONSECUTIVE_ABORTS": "1"}
        if log_both:
            env["FA_EVIL_LOG"] = "both"
        command = [sys.executable, "-m", "tests.e2e.malicious_server"]
    srv = Server(url, tmp / "server.log", env=env, command=command).start()
    try:
        yield srv
    finally:
        srv.stop()
    assert not srv.log_has_tracebacks(), (tmp / "server.log").read_text(errors="replace")[-5000:]


def metric(server: Server, name: str, label: str) -> float:
    """A counter of /metrics with `label` (e.g. `reason="task_mismatch"`), summed over its other labels (the
    process label)."""
    with urllib.request.urlopen(server.url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    pattern = rf"^{re.escape(name)}{{([^}}]*)}} ([0-9.e+-]+)$"
    values = [float(v) for labels, v in re.findall(pattern, text, re.M) if label in labels.split(",")]
    assert values, f"{name}{{{label}}} not in /metrics"
    return sum(values)


def stored_events(server: Server, token: str, query_id: str) -> list[dict[str, Any]]:
    """The query's stored events (GET …/events; the stream ends by itself once the query is terminal)."""
    req = urllib.request.Request(f"{server.url}/v1/queries/{query_id}/events", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=60) as r:
        text = r.read().decode()
    events = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if fields.get("event") not in (None, "progress", "end"):
            events.append(json.loads(fields["data"]))
    assert '"status": "failed"' in text.rsplit("event: end", 1)[-1], text[-2000:]
    return events


def run_against_malicious_server(tmp: Path, evil: str, spec: dict[str, Any], scenario: str) -> None:
    with server_process(tmp, evil) as server:
        token = server.token("admin")
        admin = AnalystClient(server.url, token)
        fleet = Fleet(server.url, N, tmp, scenario=scenario, seed=5)
        try:
            qid = admin.submit(spec)["id"]
            final = admin.wait(qid, timeout_s=WAIT_S)
        finally:
            fleet.stop()

        # the query fails naming the devices' refusals, and nothing is released
        assert final["status"] == "failed", final
        assert "task_mismatch" in (final["error"] or ""), final
        with pytest.raises(ApiError) as no_result:
            admin.result(qid)
        assert no_result.value.status == 409, no_result.value
        progress = final["progress"]
        assert progress["rounds_done"] == 0 and progress["contributors"] == 0, progress
        assert progress["cohorts"] == {"aborted": 1}, progress
        assert admin.call("GET", f"/v1/admin/queries/{qid}/contributors")["rounds"] in ({}, {"0": []})

        # the one cohort formed with the whole fleet and aborted; none finished
        events = stored_events(server, token, qid)
        types = [e["type"] for e in events]
        assert types.count("cohort.formed") == 1 and types.count("cohort.aborted") == 1, types
        assert "cohort.finished" not in types, types
        (formed,) = (e for e in events if e["type"] == "cohort.formed")
        assert formed["data"]["n"] == N, formed
        (aborted,) = (e for e in events if e["type"] == "cohort.aborted")
        assert "devices refused: task_mismatch" in aborted["data"]["reason"], aborted
        assert aborted["data"]["phase"] == "masked_input", aborted  # the members refused instead of sending it

        # the devices refused and said so: the server counted them, their own logs name the reason
        refusals = metric(server, "fa_device_refusals_total", 'reason="task_mismatch"')
        refused = set(re.findall(r"device (\w+): refused query \w+ round 0 \(task_mismatch\)",
                                 (tmp / "fleet-5.log").read_text(errors="replace")))
        print(json.dumps({"evil": evil, "refusals_counted": refusals, "devices_refusing": len(refused),
                          "error": final["error"]}))
        # every member refuses: the victim for its peers' signatures, its peers for the victim's; the cohort waits
        # for every refusal (it cannot close early: it needs all N masked inputs)
        assert len(refused) == N and refusals == N, (refused, refusals)
        assert f"task_mismatch ×{N}" in aborted["data"]["reason"], aborted
        assert metric(server, "fa_device_refusals_total", 'reason="cohort_unverified"') == 0
        # every device found its own task in the log; the public log shows the cohort's two tasks
        assert metric(server, "fa_device_refusals_total", 'reason="not_logged"') == 0
        report = audit_log(server.url)
        assert [f.code for f in report.findings] == ["task_conflict"], report.findings

    log = (tmp / "server.log").read_text(errors="replace")
    assert f"FA_EVIL={evil}: cohort" in log, "the attack did not run"


def test_a_decoy_task_missing_from_the_log_is_refused_by_its_victim(tmp_path: Path) -> None:
    """The attacker's log holds the task the cohort was shown, not the victim's decoy: the victim refuses
    (`not_logged`) before it reads any data, the cohort of exactly N cannot finish without it, nothing is released."""
    with server_process(tmp_path, "task", log_both=False) as server:
        admin = AnalystClient(server.url, server.token("admin"))
        fleet = Fleet(server.url, N, tmp_path, scenario="words", seed=5)
        try:
            qid = admin.submit(HISTOGRAM)["id"]
            final = admin.wait(qid, timeout_s=WAIT_S)
        finally:
            fleet.stop()
        assert final["status"] == "failed" and "not_logged" in (final["error"] or ""), final
        with pytest.raises(ApiError) as no_result:
            admin.result(qid)
        assert no_result.value.status == 409
        refused = re.findall(r"device (\w+): refused query \w+ round 0 \(not_logged\): transparency log: the logged "
                             r"entry \d+ is not this task", (tmp_path / "fleet-5.log").read_text(errors="replace"))
        assert len(refused) == 1 and metric(server, "fa_device_refusals_total", 'reason="not_logged"') == 1, refused
        assert audit_log(server.url, token=server.token("admin")).ok


def test_a_decoy_task_for_one_device_is_refused(tmp_path: Path) -> None:
    run_against_malicious_server(tmp_path, "task", HISTOGRAM, "words")


def test_another_cohort_size_for_one_device_is_refused(tmp_path: Path) -> None:
    run_against_malicious_server(tmp_path, "n", HISTOGRAM, "words")


def test_another_model_for_one_device_is_refused(tmp_path: Path) -> None:
    run_against_malicious_server(tmp_path, "model", training_spec(), "breast_cancer_train")


def test_an_honest_server_releases_the_exact_histogram(tmp_path: Path) -> None:
    with server_process(tmp_path, None) as server:
        admin = AnalystClient(server.url, server.token("admin"))
        fleet = Fleet(server.url, N, tmp_path, scenario="words", seed=5)
        try:
            qid = admin.submit(HISTOGRAM)["id"]
            final = admin.wait(qid, timeout_s=WAIT_S)
            assert final["status"] == "succeeded", final
            res = check_exact(admin, qid, HISTOGRAM, fleet.truth())
        finally:
            fleet.stop()
        assert res["result"]["clients"] == N
        assert metric(server, "fa_device_refusals_total", 'reason="task_mismatch"') == 0
