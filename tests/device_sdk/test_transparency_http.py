"""Devices and the server's transparency log, over real HTTP against the real app (in process).

The attacker is the server. It shows one device of a cohort a decoy task; it runs a query whose tasks it never
logged; it rewrites its log between two check-ins (a second view). Each device refuses (`not_logged`) before
it reads any data, keeps the evidence in its own transparency log, and charges nothing. With an honest server,
every contribution records the log entry and head it was checked under. The next check-in then carries the
head's size and gets a consistency proof from it.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import aiohttp
from sqlalchemy import delete, select

from analytics_server.db.models import LogEntry, LogHead, LogNode

from analytics_server.db.store import Store
from analytics_server.orchestrator import Orchestrator
from analytics_server.services import cohorts_service
from analytics_server.state import STATE
from device_sdk import DevicePolicy
from device_sdk.transparency import HEAD_META
from tests.device_sdk.fleet import Fleet, analyst, metric, run_query
from translog import entries as te
from translog.heads import Signer, TreeHead
from translog.merkle import MerkleTree

WORDS = [["moon"], ["sun", "moon"], ["star"], ["moon"], ["sun"], ["moon", "star"], ["sun"], ["star"]]
SPEC = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun", "star"]},
        "cohort": {"min_clients": 5, "max_clients": 6, "phase_timeout_s": 3}}


async def test_honest_contributions_record_the_entry_and_head_and_the_next_checkin_proves_consistency(
        start_app_server) -> None:  # type: ignore[no-untyped-def]
    server = await start_app_server()
    url = str(server.make_url(""))
    hdr = await analyst(server)
    sizes: list[int | None] = []
    async with aiohttp.ClientSession() as http:
        fleet = Fleet(server, http)
        devices = [fleet.add(rows) for rows in WORDS[:5]]
        first = await run_query(http, url, SPEC, hdr)
        assert first["status"] == "succeeded", first
        sizes = [d.client.log.last_size() for d in devices]
        second = await run_query(http, url, SPEC, hdr)
        await fleet.stop()
    assert second["status"] == "succeeded", second
    assert second["result"]["result"]["counts"] == first["result"]["result"]["counts"]
    log_size, entries = await server.app[STATE].store.log.entries(0, 1000)
    tasks = {e["cohort_id"]: (i, e) for i, e in entries if e["type"] == "task"}
    for dev, first_size in zip(devices, sizes):
        records = dev.client.transparency_log()
        assert len(records) == 2 and all(r.status == "finished" for r in records)
        for r in records:
            index, entry = tasks[r.cohort_id]
            assert r.log_index == index and entry["query_id"] == r.query_id
            assert r.log_size is not None and index < r.log_size <= log_size and r.log_root
        # the second check-in said where the device was; the head it stored extends that one
        assert first_size is not None and dev.client.log.last_size() == max(r.log_size for r in records) > first_size
    assert [e["type"] for _, e in entries].count("release") == 2


async def test_a_decoy_task_shown_to_one_device_is_refused_by_it_before_it_reads_data(
        start_app_server, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The decoy-task attack against the log: the server logs the task the cohort sees and shows the victim
    another one. The victim's digest is in no log entry: it refuses `not_logged`, reads none of its data, and
    the others' sum is released without it."""
    real = Orchestrator._make_cohort
    victims: list[str] = []

    def make(self, *args: Any, **kwargs: Any):  # type: ignore[no-untyped-def]
        cohort = real(self, *args, **kwargs)
        victim = max(cohort.members, key=cohort.members.__getitem__)
        victims.append(victim)
        a = cohort.assignments[victim]
        wire = a.model_dump(mode="json", exclude_none=True)
        decoy = {**wire["task"], "buckets": ["moon", "decoy", "star"]}  # a well-formed task, just not the logged one
        cohort.assignments[victim] = type(a).model_validate({**wire, "task": decoy})
        return cohort

    monkeypatch.setattr(Orchestrator, "_make_cohort", make)
    server = await start_app_server(max_consecutive_aborts=1)
    url = str(server.make_url(""))
    hdr = await analyst(server)
    async with aiohttp.ClientSession() as http:
        fleet = Fleet(server, http)
        devices = [fleet.add(rows) for rows in WORDS[:6]]
        final = await run_query(http, url, SPEC, hdr)
        await fleet.stop()
        refused = await metric(http, url, "fa_device_refusals_total", 'reason="not_logged"')
    (victim,) = [d for d in devices if d.client.device_id == victims[0]]
    assert [r.reason for r in victim.refusals] == ["not_logged"], victim.refusals
    assert refused >= 1
    assert victim.store.reads == [], "the victim read none of its data"
    (record,) = victim.client.transparency_log()
    assert record.status == "refused" and record.sent_at is None and record.epsilon is None
    assert "not this task" in record.detail and record.log_index is None
    assert final["status"] == "succeeded", final
    counts = final["result"]["result"]["counts"]
    assert sum(counts.values()) == 5, "the five others are in the sum, the victim is not"


async def test_a_query_whose_tasks_are_not_logged_is_refused_by_every_device(start_app_server, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A server that runs a query off the books (no `task` entries): no device contributes, nothing is released."""
    real = cohorts_service.create_cohort

    async def unlogged(store, *args: Any, task: Any = None, **kwargs: Any) -> None:  # type: ignore[no-untyped-def]
        await real(store, *args, **kwargs)

    monkeypatch.setattr(cohorts_service, "create_cohort", unlogged)
    server = await start_app_server(max_consecutive_aborts=1)
    url = str(server.make_url(""))
    hdr = await analyst(server)
    async with aiohttp.ClientSession() as http:
        fleet = Fleet(server, http)
        devices = [fleet.add(rows) for rows in WORDS[:5]]
        final = await run_query(http, url, SPEC, hdr)
        await fleet.stop()
    assert final["status"] == "failed" and not final.get("result"), final
    for dev in devices:
        assert {r.reason for r in dev.refusals} == {"not_logged"}, dev.refusals
        assert dev.store.reads == [] and dev.client.ledger.spent_since(0) == (0.0, 0.0, 0)
        assert all("no transparency-log proof" in r.detail for r in dev.client.transparency_log())


async def test_a_rewritten_log_is_refused_by_a_device_that_saw_the_old_one(start_app_server) -> None:  # type: ignore[no-untyped-def]
    """Between two queries the operator rewrites an old entry and re-signs every head with the log key. A device
    that stored a head of the old log refuses the new one (no consistency proof leads from its head); a device
    that never saw the log accepts it (which is why witnesses and auditors keep heads too)."""
    server = await start_app_server(max_consecutive_aborts=1)
    url = str(server.make_url(""))
    hdr = await analyst(server)
    store: Store = server.app[STATE].store
    async with aiohttp.ClientSession() as http:
        fleet = Fleet(server, http)
        devices = [fleet.add(rows) for rows in WORDS[:5]]
        assert (await run_query(http, url, SPEC, hdr))["status"] == "succeeded"
        await fleet.stop()
        await _rewrite_entry(store, 0)
        fleet = Fleet(server, http)
        again = [fleet.add(rows, store=d.store) for d, rows in zip(devices, WORDS)]
        final = await run_query(http, url, SPEC, hdr)
        await fleet.stop()
    assert final["status"] == "failed", final
    for dev in again:
        assert {r.reason for r in dev.refusals} == {"not_logged"}, dev.refusals
        assert "consistency proof" in dev.client.transparency_log()[0].detail


async def test_a_head_signed_by_another_key_is_refused(start_app_server) -> None:  # type: ignore[no-untyped-def]
    """A device that pins the log key refuses heads under any other key (a server that swapped keys to re-sign)."""
    server = await start_app_server(max_consecutive_aborts=1)
    url = str(server.make_url(""))
    hdr = await analyst(server)
    other = Signer(bytes(range(32)))
    pinned = DevicePolicy(log_keys=[base64.b64encode(other.public_key).decode()])
    async with aiohttp.ClientSession() as http:
        fleet = Fleet(server, http)
        devices = [fleet.add(rows, policy=pinned) for rows in WORDS[:5]]
        final = await run_query(http, url, SPEC, hdr)
        await fleet.stop()
    assert final["status"] == "failed"
    for dev in devices:
        assert {r.reason for r in dev.refusals} == {"not_logged"}
        assert "not one of the 1 pinned" in dev.client.transparency_log()[0].detail
        assert dev.store.get_meta(HEAD_META) is None


async def _rewrite_entry(store: Store, index: int) -> None:
    """What an operator with database access and the log key can do: change an entry and re-sign every head."""
    async with store.db.tx(["log"]) as s:
        rows = (await s.execute(select(LogEntry).order_by(LogEntry.idx))).scalars().all()
        body = json.loads(rows[index].body)
        body["at"] = body["at"] + 1
        rows[index].body = te.canonical(body).decode()
        rows[index].leaf_hash = te.entry_leaf_hash(body)
        tree = MerkleTree(bytes(r.leaf_hash) for r in rows)
        await s.execute(delete(LogNode))  # the tree's nodes too: the rewritten log is consistent with itself
        s.add_all([LogNode(level=level, idx=i, hash=h) for level in range(1, len(tree.levels))
                   for i, h in enumerate(tree.levels[level])])
        heads = (await s.execute(select(LogHead))).scalars().all()
        await s.execute(delete(LogHead))
        for h in heads:
            signed = store.log.signer.sign_head(TreeHead(h.origin, h.size, tree.root(h.size), h.timestamp_ms))
            s.add(LogHead(size=h.size, root=signed.head.root, timestamp_ms=h.timestamp_ms, origin=h.origin,
                          key_id=signed.key_id, signature=signed.signature))
    store.log._heads = None



async def test_devices_pinning_a_witness_need_a_fresh_cosigned_head_the_log_extends(start_app_server) -> None:  # type: ignore[no-untyped-def]
    """Split views: devices that pin a witness refuse until the witness has cosigned a head, then accept heads
    that extend it (the witness saw the one log every device must see a continuation of)."""
    witness = Signer(bytes([9]) * 32)
    wkey = base64.b64encode(witness.public_key).decode()
    server = await start_app_server(max_consecutive_aborts=1, log_witness_keys=f"w={wkey}")
    url = str(server.make_url(""))
    hdr = await analyst(server)
    store: Store = server.app[STATE].store
    policy = DevicePolicy(witness_keys=[wkey])
    async with aiohttp.ClientSession() as http:
        fleet = Fleet(server, http)
        devices = [fleet.add(rows, policy=policy) for rows in WORDS[:5]]
        refused = await run_query(http, url, SPEC, hdr)
        assert refused["status"] == "failed", refused
        assert all({r.reason for r in d.refusals} == {"not_logged"} for d in devices)
        assert "no witnessed head" in devices[0].client.transparency_log()[0].detail
        head, _ = await store.log.head()
        assert head is not None
        clock = devices[0].client.store.clock.time()
        await store.log.cosign(head.head.size, witness.cosign("w", head.head, int(clock)), {witness.key_id: witness.public_key})
        final = await run_query(http, url, SPEC, hdr)
        await fleet.stop()
    assert final["status"] == "succeeded", final
    assert all(d.client.transparency_log()[0].status == "finished" for d in devices)
