"""The transparency log's routes and storage (docs/transparency.md), in process: public reads without
credentials, bad parameters answered 4xx naming them, witnesses' cosignatures accepted only under their keys,
submits, budgets and releases logged in the transactions that record them, and appends from two server
processes on one database getting consecutive indexes under consistent signed heads."""

from __future__ import annotations

import asyncio
import base64
import hashlib

import aiohttp
import pytest

from analytics_server.db.engine import make_engine
from analytics_server.db.store import Store
from analytics_server.db.base import epoch_ms
from analytics_server.db.translog_store import LOG_LOCK
from fa_common.clock import SYSTEM_CLOCK
from analytics_server.state import STATE
from tests.device_sdk.fleet import Fleet, analyst, run_query
from tests.support.translog_cases import TASK_SECAGG
from translog import entries as te
from translog.heads import Signer, key_table, verify_head
from translog.merkle import MerkleTree, verify_consistency, verify_inclusion
from translog.wire import CosignatureModel, HeadModel, LogHeadResponse

WITNESS = Signer(hashlib.sha256(b"test witness").digest())
WITNESS_SETTING = f"test-witness={base64.b64encode(WITNESS.public_key).decode()}"


async def _get(http: aiohttp.ClientSession, url: str) -> tuple[int, dict]:
    async with http.get(url) as r:
        return r.status, await r.json()


async def test_public_routes_answer_without_credentials_and_refuse_bad_parameters(start_app_server) -> None:  # type: ignore[no-untyped-def]
    server = await start_app_server(log_witness_keys=WITNESS_SETTING)
    url = str(server.make_url(""))
    hdr = await analyst(server)
    async with aiohttp.ClientSession() as http:
        r = await http.put(url + "/v1/admin/budgets/words", json={"epsilon": 5.0, "delta": 1e-6}, headers=hdr)
        assert r.status == 200, await r.text()
        status, key = await _get(http, url + "/v1/log/key")
        assert status == 200 and key["witnesses"] == {WITNESS.key_id: base64.b64encode(WITNESS.public_key).decode()}
        status, body = await _get(http, url + "/v1/log/head")
        head = HeadModel.model_validate(body["head"]).parse()
        verify_head(head, key_table([base64.b64decode(key["public_key"])]))
        status, page = await _get(http, url + "/v1/log/entries?start=0&end=10")
        types = [e["entry"]["type"] for e in page["entries"]]
        assert types == ["budget", "budget"] and page["size"] == head.head.size == 2  # the default, then words'
        assert page["entries"][1]["entry"]["source"] == "words"
        tree = MerkleTree(te.entry_leaf_hash(e["entry"]) for e in page["entries"])
        assert tree.root() == head.head.root
        status, proof = await _get(http, url + "/v1/log/proof/inclusion?index=1&size=2")
        verify_inclusion(tree.leaf(1), 1, 2, [base64.b64decode(h) for h in proof["proof"]], head.head.root)
        for bad, code, name in (("/v1/log/entries?start=x", 400, "start"), ("/v1/log/entries?start=5&end=1", 400, "end"),
                                ("/v1/log/proof/inclusion?index=2&size=2", 400, "index"),
                                ("/v1/log/proof/inclusion?size=2", 400, "index"),
                                ("/v1/log/proof/inclusion?index=0&size=99", 404, "size"),
                                ("/v1/log/proof/consistency?first=3&second=1", 400, "first"),
                                ("/v1/log/proof/consistency?first=1&second=99999999999999999999", 400, "second"),
                                ("/v1/log/heads?start=-1", 400, "start")):
            status, body = await _get(http, url + bad)
            assert status == code and body["error"].startswith(name), (bad, status, body)
        # witnesses: a cosignature under an unknown key, a bad signature, then a good one
        cos = CosignatureModel.of(WITNESS.cosign("test-witness", head.head, 1_800_000_000)).model_dump()
        rogue = CosignatureModel.of(Signer(bytes(32)).cosign("rogue", head.head, 1)).model_dump()
        r = await http.post(url + "/v1/log/cosignatures", json={**rogue, "size": 2})
        assert r.status == 403 and "key_id" in (await r.json())["error"]
        r = await http.post(url + "/v1/log/cosignatures", json={**cos, "time": 5, "size": 2})
        assert r.status == 422 and "signature" in (await r.json())["error"]
        r = await http.post(url + "/v1/log/cosignatures", json={**cos, "size": 1})
        assert r.status == 422
        r = await http.post(url + "/v1/log/cosignatures", json={**cos, "size": 2})
        assert r.status == 200 and (await r.json())["stored"] is True
        status, body = await _get(http, url + "/v1/log/head")
        assert LogHeadResponse.model_validate(body).cosignatures[0].key_id == WITNESS.key_id
        r = await http.post(url + "/v1/log/cosignatures", data=b"{", headers={"Content-Type": "application/json"})
        assert r.status == 400


async def test_a_query_is_logged_from_submit_to_release_and_a_witnessed_head_reaches_devices(start_app_server) -> None:  # type: ignore[no-untyped-def]
    server = await start_app_server(log_witness_keys=WITNESS_SETTING)
    url = str(server.make_url(""))
    hdr = await analyst(server)
    store: Store = server.app[STATE].store
    head, _ = await store.log.head()
    assert head is not None
    await store.log.cosign(head.head.size, WITNESS.cosign("test-witness", head.head, 1), key_table([WITNESS.public_key]))
    spec = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun"]},
            "privacy": {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6},
            "cohort": {"min_clients": 5, "max_clients": 5}}
    async with aiohttp.ClientSession() as http:
        fleet = Fleet(server, http)
        for rows in (["moon"], ["sun"], ["moon"], ["moon"], ["sun"]):
            fleet.add(rows)
        final = await run_query(http, url, spec, hdr)
        await fleet.stop()
        result = (await (await http.get(f"{url}/v1/queries/{final['id']}/result", headers=hdr)).json())
    assert final["status"] == "succeeded", final
    size, entries = await store.log.entries(0, 100)
    mine = [e for _, e in entries if e.get("query_id") == final["id"]]
    assert [e["type"] for e in mine] == ["query", "charge", "task", "release"]
    assert mine[0]["spec_digest"] == te.digest(mine[0]["spec"]) and mine[0]["kind"] == "histogram"
    assert mine[1]["epsilon"] == pytest.approx(1.0)
    assert mine[3]["result_digest"] == te.digest(result["result"]) and mine[3]["status"] == "succeeded"
    proof = await store.log.task_proof(mine[2]["cohort_id"], 1)
    assert proof is not None and proof.witnessed is not None and proof.witnessed.head.size == head.head.size
    new = proof.head.parse().head
    w = proof.witnessed.head.parse().head
    verify_consistency(w.size, new.size, w.root, new.root, [base64.b64decode(h) for h in proof.witnessed.consistency])


async def test_two_processes_appending_at_once_get_consecutive_indexes_under_consistent_heads(migrated_url: str) -> None:
    """Two `Store`s (as two server processes have) on one database append 40 entries each at once."""
    stores = [Store(make_engine(migrated_url)) for _ in range(2)]
    seed = bytes(range(32))
    for s in stores:
        await s.log.setup(seed, "test/log")

    async def append(store: Store, tag: str) -> None:
        for i in range(40):
            async with store.db.tx([LOG_LOCK]) as s:
                await store.log.append(s, [te.task_entry(tag, i, f"{tag}{i:08d}", bytes(32), epoch_ms(SYSTEM_CLOCK), TASK_SECAGG)])

    await asyncio.gather(*(append(s, tag) for s, tag in zip(stores, ("a", "b"))))
    size, entries = await stores[0].log.entries(0, 1000)
    assert size == 80 and [i for i, _ in entries] == list(range(80))
    tree = MerkleTree(te.entry_leaf_hash(e) for _, e in entries)
    heads = await stores[1].log.heads(0, 1000)
    assert [h.head.size for h in heads] == list(range(1, 81))
    for h in heads:
        assert tree.root(h.head.size) == h.head.root
    for s in stores:
        await s.engine.dispose()


async def test_a_log_key_file_signs_the_heads_and_a_bad_one_stops_the_start(start_app_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`fa-server log-key FILE` writes the key FA_LOG_KEY_FILE names; the server signs with it (not with a key of
    its database) and says so in /healthz; an unreadable key file stops the server before it serves."""
    from analytics_server.cli import main as fa_server
    from translog.keyfile import read_seed

    path = tmp_path / "log.key"
    assert fa_server(["log-key", str(path)]) == 0
    assert (path.stat().st_mode & 0o777) == 0o600
    signer = Signer(read_seed(path))
    server = await start_app_server(log_key_file=str(path))
    url = str(server.make_url(""))
    async with aiohttp.ClientSession() as http:
        status, key = await _get(http, url + "/v1/log/key")
        assert key["key_id"] == signer.key_id and key["origin"] == f"fed-analytics/{signer.key_id}"
        status, body = await _get(http, url + "/v1/log/head")
        verify_head(HeadModel.model_validate(body["head"]).parse(), key_table([signer.public_key]))
        status, health = await _get(http, url + "/healthz")
        assert health["log_key"] == "file"
    bad = tmp_path / "bad.key"
    bad.write_text("not base64!\n")
    with pytest.raises(ValueError, match="log_key_file"):
        await start_app_server(log_key_file=str(bad))


def test_serve_in_production_without_a_log_key_file_is_refused(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    from analytics_server import cli
    from tests.analytics_server.conftest import fixed_issuer_keys

    monkeypatch.setenv("FA_PROFILE", "production")
    monkeypatch.setenv("FA_ISSUER_KEYS", fixed_issuer_keys())
    monkeypatch.delenv("FA_LOG_KEY_FILE", raising=False)
    assert cli.main(["serve", "--db", f"sqlite+aiosqlite:///{tmp_path / 'none.db'}"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "fa-server log-key FILE" in err and "FA_LOG_KEY_FILE" in err and "Traceback" not in err
    assert not (tmp_path / "none.db").exists()
