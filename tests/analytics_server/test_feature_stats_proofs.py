"""feature_stats with validity proofs, in process over HTTP: each feature's first moment is linked to its count and
(with bins) its second moment to the bins' sum (queries/feature_stats.py `validity`). A device that claims no rows
and every moment at its largest — each entry within its own range, which a statement of independent ranges would
accept — cannot prove it: its proof is refused, the device is left out of the rest of the query (both rounds), the
query completes with the honest devices, and the release equals what they alone give."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import numpy as np
import pytest

from analytics_server.state import STATE
from queries.local_run import run_locally
from queries.registry import get_kind
from tests.bent_device import BENT, bend
from tests.device_sdk.fleet import Fleet, analyst, query_end

PARAMS: dict[str, Any] = {"features": [{"name": "age", "lower": 0.0, "upper": 100.0}], "bins": 4,
                          "max_examples_per_device": 5}
SPEC = {"kind": "feature_stats", "source": "examples", "params": PARAMS,
        "privacy": {"mechanism": "none"},  # no `validation`: proofs by default (asserted on the result)
        "cohort": {"min_clients": 3, "max_clients": 3, "phase_timeout_s": 10}}


def _rows(rng: np.random.Generator, n: int) -> list[list[dict[str, Any]]]:
    return [[{"age": float(v)} for v in rng.uniform(10, 40, size=int(rng.integers(1, 5)))] for _ in range(n)]


@pytest.mark.parametrize("bins", [4, 0])
async def test_a_device_claiming_moments_without_rows_is_caught(
        start_app_server: Any, monkeypatch: pytest.MonkeyPatch, bins: int) -> None:
    bend(monkeypatch)
    server = await start_app_server(cohort_formation_wait_s=0.0)
    url = str(server.make_url(""))
    st = server.app[STATE]
    hdr = await analyst(server)
    params = {k: v for k, v in PARAMS.items() if k != "bins"} | ({"bins": bins} if bins else {})
    rng = np.random.default_rng(8)
    first, later = _rows(rng, 2), _rows(rng, 6)
    async with aiohttp.ClientSession() as http:
        r = await http.post(url + "/v1/queries", json={**SPEC, "params": params}, headers=hdr)
        assert r.status == 201, await r.text()
        qid = (await r.json())["id"]
        fleet = Fleet(server, http)
        cheater = fleet.add([BENT + "zero_count", *first[0]], source="examples")
        for rows in first:
            fleet.add(rows, source="examples")
        for _ in range(600):
            if st.metrics.proofs_refused:
                break
            await asyncio.sleep(0.1)
        assert st.metrics.proofs_refused >= 1  # the first moments: a moment above its count
        fresh = [fleet.add(rows, source="examples") for rows in later]
        status = await query_end(http, url, qid, hdr, timeout_s=120)
        assert status["status"] == "succeeded", status
        res = status["result"]
        listing = await (await http.get(f"{url}/v1/admin/queries/{qid}/contributors", headers=hdr)).json()
        contributors = listing["rounds"]
        await fleet.stop()
    assert res["privacy"]["validation"] == "proofs"
    rows = {dev.client.device_id: r for dev, r in zip(fresh, later)}
    rows.update({dev.client.device_id: r for dev, r in zip(fleet.devices[1:3], first)})
    cheater_id = cheater.client.device_id
    assert all(cheater_id not in devices for devices in contributors.values())
    # refused once, then left out of every later cohort of the query (both rounds), and the result says so
    excluded = await st.store.queries.excluded_devices(qid)
    assert list(excluded) == [cheater_id] and excluded[cheater_id].startswith("validity proof refused")
    assert listing["excluded"] == excluded
    assert st.metrics.proofs_refused == 1 and res["privacy"]["devices_excluded"] == 1
    expected, _ = run_locally(get_kind("feature_stats"), params, [rows[d] for d in contributors["0"]])
    got = res["result"]["features"]["age"]
    assert got["count"] == expected["features"]["age"]["count"]  # the honest devices alone, exactly (no noise)
    assert got["mean"] == pytest.approx(expected["features"]["age"]["mean"], abs=1e-6)


async def test_without_bins_a_device_honest_in_the_first_round_cannot_claim_second_moments_without_rows(
        start_app_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """No bins, proofs by default: the second round carries each feature's count (`count_second_round`), so a device
    that answers the first moments honestly and then claims every second moment at its largest with no rows — which
    a second round of second moments alone would take — is refused in the second round and left out; the query
    completes with the honest devices and releases no histogram (none was asked for)."""
    bend(monkeypatch)
    server = await start_app_server(cohort_formation_wait_s=0.0)
    url = str(server.make_url(""))
    st = server.app[STATE]
    hdr = await analyst(server)
    params = {k: v for k, v in PARAMS.items() if k != "bins"}
    rng = np.random.default_rng(9)
    first, later = _rows(rng, 2), _rows(rng, 6)
    async with aiohttp.ClientSession() as http:
        r = await http.post(url + "/v1/queries", json={**SPEC, "params": params}, headers=hdr)
        assert r.status == 201, await r.text()
        qid = (await r.json())["id"]
        fleet = Fleet(server, http)
        cheater = fleet.add([BENT + "zero_second", *first[0]], source="examples")
        for rows in first:
            fleet.add(rows, source="examples")
        for _ in range(600):
            if st.metrics.proofs_refused:
                break
            await asyncio.sleep(0.1)
        assert st.metrics.proofs_refused >= 1  # the second moments: a second moment above its count
        for rows in later:
            fleet.add(rows, source="examples")
        status = await query_end(http, url, qid, hdr, timeout_s=120)
        assert status["status"] == "succeeded", status
        res = status["result"]
        contributors = (await (await http.get(f"{url}/v1/admin/queries/{qid}/contributors", headers=hdr)).json())["rounds"]
        await fleet.stop()
    assert res["privacy"]["validation"] == "proofs"
    cheater_id = cheater.client.device_id
    assert cheater_id in contributors["0"] and cheater_id not in contributors["1"]  # honest first, refused second
    excluded = await st.store.queries.excluded_devices(qid)
    assert list(excluded) == [cheater_id] and excluded[cheater_id].startswith("validity proof refused")
    assert st.metrics.proofs_refused == 1 and res["privacy"]["devices_excluded"] == 1
    got = res["result"]["features"]["age"]
    assert "histogram" not in got and got["count"] > 0 and got["var"] > 0
