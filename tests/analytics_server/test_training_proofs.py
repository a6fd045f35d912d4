"""FedAvg with validity proofs, in process over HTTP: clipped model updates prove each entry within the clip bound
and their weight in [0, W] (queries/training/kind.py `validity`). A device that masks an update entry 3× its bound,
or a negative weight that would shrink the denominator and amplify the step, behind a proof of the vector clipped
into range, is caught by the opening check: its cohort releases nothing, and the round completes with fresh devices
and releases what the honest devices alone give."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import numpy as np
import pytest

from analytics_server.state import STATE
from queries.local_run import run_locally
from queries.registry import get_kind
from tests.bent_device import BENT, PROVED, bend
from tests.device_sdk.fleet import Fleet, analyst, query_end

PARAMS: dict[str, Any] = {"model": {"name": "logistic", "n_features": 3}, "rounds": 1, "eval_every": 0,
                          "holdout_fraction": 0.0, "client": {"epochs": 1, "batch_size": 0, "lr": 1.0},
                          "server_optimizer": {"name": "fedavg", "lr": 1.0}, "clip_norm": 1.0}
SPEC = {"kind": "training", "source": "examples", "params": PARAMS,
        "privacy": {"mechanism": "none"},  # no `validation`: proofs by default (asserted on the result)
        "cohort": {"min_clients": 3, "max_clients": 3, "phase_timeout_s": 10}}


def _rows(rng: np.random.Generator, n: int) -> list[list[dict[str, Any]]]:
    out = []
    for _ in range(n):
        x = rng.normal(size=(int(rng.integers(2, 5)), 3))
        out.append([{"x": [float(v) for v in row], "y": int(row[0] + 0.5 * row[1] > 0)} for row in x])
    return out


@pytest.mark.parametrize("attack", ["beyond_range", "negative_weight"])
async def test_a_bent_model_update_is_caught_and_the_round_completes_without_it(
        start_app_server: Any, monkeypatch: pytest.MonkeyPatch, attack: str) -> None:
    bend(monkeypatch)
    server = await start_app_server(cohort_formation_wait_s=0.0)
    url = str(server.make_url(""))
    st = server.app[STATE]
    hdr = await analyst(server)
    rng = np.random.default_rng(3)
    first, later = _rows(rng, 2), _rows(rng, 3)
    async with aiohttp.ClientSession() as http:
        r = await http.post(url + "/v1/queries", json=SPEC, headers=hdr)
        assert r.status == 201, await r.text()
        qid = (await r.json())["id"]
        fleet = Fleet(server, http)
        for rows in [[BENT + attack, *first[0]], *first]:
            fleet.add(rows, source="examples")
        for _ in range(600):
            if st.metrics.cheating_detected:
                break
            await asyncio.sleep(0.1)
        assert st.metrics.cheating_detected == 1
        fresh = [fleet.add(rows, source="examples") for rows in later]
        status = await query_end(http, url, qid, hdr, timeout_s=90)
        assert status["status"] == "succeeded", status
        res = status["result"]
        contributors = (await (await http.get(f"{url}/v1/admin/queries/{qid}/contributors", headers=hdr)).json())
        await fleet.stop()
    rows = {dev.client.device_id: r for dev, r in zip(fresh, later)}
    assert sorted(contributors["rounds"]["0"]) == sorted(rows)  # the fresh cohort: no device of the caught one
    assert res["privacy"]["validation"] == "proofs"
    expected, _ = run_locally(get_kind("training"), PARAMS, later)
    # the same honest updates, up to their stochastic rounding (2^-20 of the clip bound per entry and device)
    np.testing.assert_allclose(res["result"]["weights"], expected["weights"], atol=1e-3)


async def test_a_sign_vote_beyond_plus_minus_one_is_refused_with_the_default_spec(
        start_app_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rprop on secure sign votes, no `validation` field: a device that proves a vote of 1,000 (the real prover with
    its checks off) is refused when its masked input arrives and left out; the round completes without it and the
    released step equals the honest devices' votes."""
    bend(monkeypatch)
    params = {**PARAMS, "server_optimizer": {"name": "rprop"}}
    server = await start_app_server(cohort_formation_wait_s=0.0)
    url = str(server.make_url(""))
    st = server.app[STATE]
    hdr = await analyst(server)
    honest = _rows(np.random.default_rng(4), 3)
    async with aiohttp.ClientSession() as http:
        r = await http.post(url + "/v1/queries", json={**SPEC, "params": params,
                                                       "cohort": {"min_clients": 3, "max_clients": 4, "phase_timeout_s": 10}},
                            headers=hdr)
        assert r.status == 201, await r.text()
        qid = (await r.json())["id"]
        fleet = Fleet(server, http)
        devices = [fleet.add(rows, source="examples") for rows in honest]
        cheater = fleet.add([BENT + "vote_1000" + PROVED, *honest[0]], source="examples")
        status = await query_end(http, url, qid, hdr, timeout_s=90)
        listing = await (await http.get(f"{url}/v1/admin/queries/{qid}/contributors", headers=hdr)).json()
        await fleet.stop()
    assert status["status"] == "succeeded", status
    res = status["result"]
    assert res["privacy"]["validation"] == "proofs" and st.metrics.proofs_refused >= 1
    assert list(listing["excluded"]) == [cheater.client.device_id]
    assert sorted(listing["rounds"]["0"]) == sorted(d.client.device_id for d in devices)
    expected, _ = run_locally(get_kind("training"), params, honest)
    np.testing.assert_allclose(res["result"]["weights"], expected["weights"], atol=1e-9)
