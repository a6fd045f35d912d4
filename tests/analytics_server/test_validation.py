"""Validity proofs through the real app in process: the default for kinds that support them, an honest fleet's
result unchanged, a cheating device refused or detected (the released result equals the honest devices'),
specs refused with the field named."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp.test_utils import TestServer

from analytics_server.state import STATE
from device_sdk.client import DeviceClient
from device_sdk.options import ClientOptions, NetworkOptions
from device_sdk.store import LocalStore
from queries.local_run import run_locally
from queries.registry import get_kind
from tests.bent_device import BENT, PROVED, bend

BUCKETS = ["moon", "sun", "star"]


def _spec(validation: str | None = None, **cohort: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"kind": "histogram", "source": "words", "params": {"buckets": BUCKETS},
                            "cohort": {"min_clients": 3, "max_clients": 50, "phase_timeout_s": 5, **cohort}}
    if validation:
        spec["privacy"] = {"validation": validation}
    return spec


async def _submit(http: aiohttp.ClientSession, url: str, hdr: dict[str, str], spec: dict[str, Any]) -> str:
    r = await http.post(url + "/v1/queries", json=spec, headers=hdr)
    assert r.status == 201, await r.text()
    return str((await r.json())["id"])


async def _wait(http: aiohttp.ClientSession, url: str, hdr: dict[str, str], qid: str, limit_s: float = 60) -> dict[str, Any]:
    for _ in range(int(limit_s * 10)):
        status = await (await http.get(f"{url}/v1/queries/{qid}", headers=hdr)).json()
        if status["status"] not in ("pending", "running"):
            break
        await asyncio.sleep(0.1)
    assert status["status"] == "succeeded", status
    return dict(await (await http.get(f"{url}/v1/queries/{qid}/result", headers=hdr)).json())


def _rows(rng: np.random.Generator, n: int) -> list[list[str]]:
    return [[str(w) for w in rng.choice(BUCKETS + ["comet"], size=int(rng.integers(1, 4)))] for _ in range(n)]


async def _fleet(http: aiohttp.ClientSession, url: str, data: list[list[str]], stop: asyncio.Event) -> tuple[list[DeviceClient], list[asyncio.Task[None]]]:
    clients = []
    for rows in data:
        store = LocalStore()
        store.add_many("words", rows)
        clients.append(DeviceClient(url, store, ClientOptions(network=NetworkOptions(session=http, checkin_wait_s=1))))
    return clients, [asyncio.create_task(c.run_forever(stop)) for c in clients]


async def test_honest_fleet_result_is_the_same_with_and_without_proofs(app_server: TestServer) -> None:
    url = str(app_server.make_url(""))
    hdr = {"Authorization": f"Bearer {await app_server.app[STATE].store.tokens.create('admin')}"}
    data = _rows(np.random.default_rng(5), 6)
    expected, _ = run_locally(get_kind("histogram"), {"buckets": BUCKETS}, data)
    stop = asyncio.Event()
    async with aiohttp.ClientSession() as http:
        _, tasks = await _fleet(http, url, data, stop)
        results = {}
        for mode in ("proofs", "none", None):
            results[mode] = await _wait(http, url, hdr, await _submit(http, url, hdr, _spec(mode, min_clients=6)))
        stop.set()
        await asyncio.gather(*tasks)
    for mode, res in results.items():
        assert res["result"] == expected, mode
    assert results["proofs"]["privacy"]["validation"] == "proofs"
    assert results[None]["privacy"]["validation"] == "proofs"  # the default for histograms
    assert results["none"]["privacy"]["validation"] == "none"
    # a result without proofs says so first, in its warnings (the console and `fa` show it above the values)
    assert results["none"]["warnings"][0]["path"] == "privacy.validation"
    assert "no device proved" in results["none"]["warnings"][0]["message"]
    assert not any(w["path"] == "privacy.validation" for w in results["proofs"]["warnings"] + results[None]["warnings"])


@pytest.mark.parametrize("attack", ["forged", "replayed"])
async def test_a_bad_proof_drops_the_device(app_server: TestServer, monkeypatch: pytest.MonkeyPatch, attack: str) -> None:
    bend(monkeypatch)
    url = str(app_server.make_url(""))
    st = app_server.app[STATE]
    hdr = {"Authorization": f"Bearer {await st.store.tokens.create('admin')}"}
    honest = _rows(np.random.default_rng(7), 5)
    stop = asyncio.Event()
    async with aiohttp.ClientSession() as http:
        qid = await _submit(http, url, hdr, _spec(min_clients=5))
        clients, tasks = await _fleet(http, url, honest + [[BENT + attack, "moon"]], stop)
        res = await _wait(http, url, hdr, qid)
        stop.set()
        await asyncio.gather(*tasks)
        contributors = (await (await http.get(f"{url}/v1/admin/queries/{qid}/contributors", headers=hdr)).json())["rounds"]["0"]
    assert clients[-1].device_id not in contributors
    rows = {c.device_id: r for c, r in zip(clients, honest)}
    expected, _ = run_locally(get_kind("histogram"), {"buckets": BUCKETS}, [rows[d] for d in contributors])
    assert res["result"] == expected
    assert st.metrics.proofs_refused >= 1


SKELLAM = {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6}


@pytest.mark.parametrize(("attack", "privacy"), [("vote_twice", None), ("negative", None), ("noise_beyond_bound", SKELLAM)])
async def test_a_device_that_masks_another_vector_is_detected(
    start_app_server: Any, monkeypatch: pytest.MonkeyPatch, attack: str, privacy: dict[str, Any] | None
) -> None:
    """A cheater behind a valid proof (two votes, a −1, "noise" far beyond B): its cohort releases nothing (detected
    cheating; without noise its devices are not seated again in the round — with noise they may be, at the price
    of one more run: tests/analytics_server/test_failed_openings.py); the round completes without the cheater and
    releases exactly the honest devices' counts (without noise), with the bound and the δ spent on truncation
    reported."""
    bend(monkeypatch)
    server = await start_app_server(cohort_formation_wait_s=0.0)
    url = str(server.make_url(""))
    st = server.app[STATE]
    hdr = {"Authorization": f"Bearer {await st.store.tokens.create('admin')}"}
    rng = np.random.default_rng(11)
    first, later = _rows(rng, 2), _rows(rng, 4)
    spec = _spec(min_clients=3, max_clients=3)
    if privacy:
        spec["privacy"] = privacy
    stop = asyncio.Event()
    async with aiohttp.ClientSession() as http:
        qid = await _submit(http, url, hdr, spec)
        firsts, tasks = await _fleet(http, url, [[BENT + attack, "sun"]] + first, stop)
        for _ in range(300):
            if st.metrics.cheating_detected:
                break
            await asyncio.sleep(0.1)
        assert st.metrics.cheating_detected >= 1
        more, more_tasks = await _fleet(http, url, later, stop)
        res = await _wait(http, url, hdr, qid)
        stop.set()
        await asyncio.gather(*tasks, *more_tasks)
        contributors = (await (await http.get(f"{url}/v1/admin/queries/{qid}/contributors", headers=hdr)).json())["rounds"]["0"]
    rows = {c.device_id: r for c, r in zip(more, later)}
    assert firsts[0].device_id not in contributors and res["result"]["clients"] == len(contributors) == 3
    if privacy is None:  # no first-cohort device joined a second sum
        assert set(contributors) <= set(rows)
    else:  # the honest first-cohort devices may have, the query charged one more run for it
        assert set(contributors) <= set(rows) | {c.device_id for c in firsts[1:]}
    p = res["privacy"]
    assert p["validation"] == "proofs"
    if privacy is None:
        expected, _ = run_locally(get_kind("histogram"), {"buckets": BUCKETS}, [rows[d] for d in contributors])
        assert res["result"] == expected
    else:
        assert p["delta"] == 1e-6 and p["truncation_delta"] == pytest.approx(1e-8)
        assert p["delta_calibrated"] == pytest.approx(0.99e-6) and p["validation_rounds"][0]["noise_bound"] >= 1


async def test_specs_name_the_validation_field(start_app_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    server = await start_app_server(require_validation=True)
    url = str(server.make_url(""))
    hdr = {"Authorization": f"Bearer {await server.app[STATE].store.tokens.create('admin')}"}
    training = {"kind": "training", "source": "examples",
                "params": {"model": {"name": "logistic", "n_features": 3}, "rounds": 1, "eval_every": 0},
                "privacy": {"validation": "proofs"}}
    async with aiohttp.ClientSession() as http:
        r = await http.post(url + "/v1/queries", json=training, headers=hdr)
        assert r.status == 201, await r.text()  # clipped model updates prove their bounds
        with monkeypatch.context() as m:  # a kind without a statement for its rounds
            m.setattr(get_kind("training"), "validity", lambda task: None)
            r = await http.post(url + "/v1/queries", json=training, headers=hdr)
            assert r.status == 422 and "privacy.validation: training cannot prove" in (await r.text())
            r = await http.post(url + "/v1/queries", json={**training, "privacy": {}}, headers=hdr)
            assert r.status == 201  # "none" by default for such a kind, even where proofs are required
        r = await http.post(url + "/v1/queries", json={**training, "privacy": {"validation": "none"}}, headers=hdr)
        assert r.status == 422 and "FA_REQUIRE_VALIDATION" in (await r.text())
        r = await http.post(url + "/v1/queries", json=_spec("none"), headers=hdr)
        assert r.status == 422 and "FA_REQUIRE_VALIDATION" in (await r.text())
        r = await http.post(url + "/v1/queries", json=_spec("maybe"), headers=hdr)
        assert r.status == 422 and "validation" in (await r.text())


async def test_proofs_are_the_default_in_every_profile(start_app_server: Any) -> None:
    """Proofs by default for a cheap histogram and for a full heavy-hitters frontier with noise (which defaulted to
    "none" by cost before the bit-vector proofs), whether or not the server requires them; "none" is refused only
    where the profile requires proofs."""
    hh = {"kind": "heavy_hitters", "source": "words", "params": {"mode": "secagg", "max_length": 4, "max_frontier": 32},
          "privacy": {"mechanism": "skellam", "epsilon": 4.0, "delta": 1e-6},
          "cohort": {"min_clients": 400, "max_clients": 500}}
    for required in (False, True):
        server = await start_app_server(require_validation=required)
        url = str(server.make_url(""))
        store = server.app[STATE].store
        hdr = {"Authorization": f"Bearer {await store.tokens.create('admin')}"}
        async with aiohttp.ClientSession() as http:
            expensive = await _submit(http, url, hdr, hh)
            cheap = await _submit(http, url, hdr, _spec())
            unproved = _spec("none")
            async with http.post(f"{url}/v1/queries", json=unproved, headers=hdr) as resp:
                assert resp.status == (422 if required else 201), await resp.text()
        assert (await store.queries.get(expensive)).spec["privacy"]["validation"] == "proofs", required
        assert (await store.queries.get(cheap)).spec["privacy"]["validation"] == "proofs"
        await server.close()


DEFAULT_SPECS: dict[str, dict[str, Any]] = {
    "histogram": {"kind": "histogram", "source": "words", "params": {"buckets": BUCKETS}},
    "heavy_hitters": {"kind": "heavy_hitters", "source": "words",
                      "params": {"mode": "secagg", "max_length": 3, "alphabet": "mnorstu", "max_frontier": 4}},
}


@pytest.mark.parametrize("kind", sorted(DEFAULT_SPECS))
async def test_with_the_default_spec_a_device_proving_two_votes_is_refused_and_left_out(
        start_app_server: Any, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """No `validation` field: the server asks every device for a proof. A device proving its bent vector (two votes
    where one is allowed) is refused when its masked input arrives and left out of the rest of the query, which
    completes with the honest devices' result (feature_stats: test_feature_stats_proofs.py; clipped updates:
    test_training_proofs.py)."""
    bend(monkeypatch)
    server = await start_app_server(cohort_formation_wait_s=0.0)
    url = str(server.make_url(""))
    st = server.app[STATE]
    hdr = {"Authorization": f"Bearer {await st.store.tokens.create('admin')}"}
    honest = [[str(w) for w in np.random.default_rng(5).choice(BUCKETS, size=2)] for _ in range(4)]
    spec = {**DEFAULT_SPECS[kind], "cohort": {"min_clients": 4, "max_clients": 5, "phase_timeout_s": 5}}
    stop = asyncio.Event()
    async with aiohttp.ClientSession() as http:
        qid = await _submit(http, url, hdr, spec)
        clients, tasks = await _fleet(http, url, honest + [[BENT + "vote_twice" + PROVED, "moon", "sun"]], stop)
        res = await _wait(http, url, hdr, qid, limit_s=90)
        stop.set()
        await asyncio.gather(*tasks)
        listing = await (await http.get(f"{url}/v1/admin/queries/{qid}/contributors", headers=hdr)).json()
    cheater = clients[-1].device_id
    assert res["privacy"]["validation"] == "proofs" and res["privacy"]["devices_excluded"] == 1  # the default
    assert st.metrics.proofs_refused >= 1 and st.metrics.cheating_detected == 0
    assert list(listing["excluded"]) == [cheater] and listing["excluded"][cheater].startswith("validity proof refused")
    assert all(cheater not in ids for ids in listing["rounds"].values())
    if kind == "histogram":
        rows = {c.device_id: r for c, r in zip(clients, honest)}
        expected, _ = run_locally(get_kind(kind), spec["params"], [rows[d] for d in listing["rounds"]["0"]])
        assert res["result"] == expected
