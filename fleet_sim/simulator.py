"""A fleet of simulated devices in one asyncio loop (or several processes), for tests, demo and bench.

Each device has an in-memory `LocalStore` filled by a scenario (fleet_sim.scenarios) and a real
`DeviceClient`. Dropout: with probability `dropout` per cohort, a device stops answering before a
uniformly chosen phase, then stays offline for a while. `truth` maps device id → its local data, so the
caller can recompute the exact answer over the devices the server reports as contributors.

Keys, nonces, masks and noise come from OS entropy, as on a real device. With `seeded_randomness` (fa-sim
`--seeded-randomness`) device i's key is drawn from SeededRandom("fa-sim/<seed>/identity/<i>") and the
device then runs on SeededRandom("fa-sim/device/" ‖ key): reproducible runs, against a fresh server only
(a seeded device repeats its request nonces).
"""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing as mp
import os
import signal
import threading
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from device_sdk.client import KEY_META, DeviceClient, Outcome, new_connector
from device_sdk.hooks import DeviceHooks, DropoutFn
from device_sdk.identity import Enrolment
from device_sdk.options import ClientOptions, NetworkOptions
from device_sdk.policy import DevicePolicy
from device_sdk.sessions import SECURE_AGGREGATION, SESSION_FACTORIES, SessionFactory
from fa_common.b64 import b64e
from fleet_sim.scenarios import generate
from device_sdk.store import LocalStore
from queries.envelope import Assignment
from secagg.plain import bench_unmasked
from secagg.randomness import OsRandom, RandomSource, SeededRandom

log = logging.getLogger(__name__)
FLEET_KEEPALIVE_S = 12.0
"""Idle reuse of the fleet's pooled connections (one pool for all its devices), below the server's 15 s default
idle timeout. A device's own SDK keeps 5 s (`client.KEEPALIVE_S`): a phone sends its next message milliseconds
after computing it, but a simulated device waits its turn on the CPU it shares with thousands (`compute_gate`),
and with 5 s the pool's connections expired mid-phase, so most of a 5,000-device phase opened new ones."""


@dataclass
class FleetStats:
    outcomes: dict[str, int] = field(default_factory=dict)
    last_assignment: float = field(default_factory=time.monotonic)
    queries_running: int = 0

    def record(self, out: Outcome) -> None:
        self.outcomes[out.status] = self.outcomes.get(out.status, 0) + 1
        self.queries_running = out.queries_running
        if out.status != "idle":
            self.last_assignment = time.monotonic()


def make_devices(
    n: int, scenario: str, seed: int, start: int = 0, seeded_randomness: bool = False
) -> list[tuple[bytes, dict[str, list[Any]]]]:
    """(private key bytes, local data) per device; keys from the OS (or seeded), data from the seeded scenario."""
    def key(i: int) -> bytes:
        source = SeededRandom(b"fa-sim/%d/identity/%d" % (seed, i)) if seeded_randomness else OsRandom()
        return source.bytes(32)

    return [(key(start + i), generate(scenario, seed, start + i)) for i in range(n)]


def device_randomness(key: bytes, seeded_randomness: bool) -> RandomSource | None:
    """A simulated device's root source: None (the client's OS default) unless seeded runs were asked for."""
    return SeededRandom(b"fa-sim/device/" + key) if seeded_randomness else None


def dropout_policy(p: float, rng: random.Random, session: SessionFactory = SECURE_AGGREGATION) -> DropoutFn:
    """With probability `p` per assignment, the phase before which the device stops answering (uniformly among
    the phases its `session` has: the unmasked benchmark session has one, its first)."""
    def decide(a: Assignment) -> int | None:
        if p <= 0 or rng.random() >= p:
            return None
        phases = [0, 1, 2, 3, 4] if a.threat_model == "active" else [0, 1, 2, 4]
        return rng.choice(phases if session is SECURE_AGGREGATION else [a.first_phase])

    return decide


async def run_fleet(
    server: str,
    devices: Sequence[tuple[bytes, dict[str, list[Any]]]],
    dropout: float = 0.0,
    seed: int = 0,
    until_idle: bool = False,
    idle_s: float = 10.0,
    checkin_wait_s: float = 10.0,
    stop: asyncio.Event | None = None,
    parent_pid: int | None = None,
    seeded_randomness: bool = False,
    split: bool = False,
    policy: dict[str, Any] | None = None,
    enrolments: Sequence[Enrolment] | None = None,
) -> FleetStats:
    """Run the devices until `stop` (or idle). `server`: one URL or comma-separated URLs of processes sharing
    a database; with `split` each device starts at a different one (spread by its id), not the first.
    `policy`: `DevicePolicy` fields every device applies (default: none of its limits); `enrolments`: one per
    device, in order, when the devices enrol with an identity issuer (docs/identities.md)."""
    stop = stop or asyncio.Event()
    stats = FleetStats()
    rng = random.Random(seed)
    async with aiohttp.ClientSession(connector=new_connector(FLEET_KEEPALIVE_S)) as http:
        clients = []
        gate = asyncio.Lock()  # the devices take turns on the CPU they share: each message leaves once computed
        # make bench's switch of this process (secagg.plain), never the server's word
        session = SESSION_FACTORIES["unmasked" if bench_unmasked() else "secure_aggregation"]
        for i, (key, data) in enumerate(devices):
            store = LocalStore(":memory:")
            store.set_meta(KEY_META, b64e(key))
            for coll, rows in data.items():
                store.add_many(coll, rows)
            hooks = DeviceHooks(dropout=dropout_policy(dropout, rng, session), compute_gate=gate, session_factory=session)
            client = DeviceClient(server, store, ClientOptions(
                policy=DevicePolicy(**(policy or {})), network=NetworkOptions(session=http, checkin_wait_s=checkin_wait_s),
                randomness=device_randomness(key, seeded_randomness), hooks=hooks,
                enrolment=enrolments[i] if enrolments else None,
            ))
            if split:
                client.start_at(int(client.device_id[:8], 16))
            clients.append(client)

        async def one(c: DeviceClient) -> None:
            await asyncio.sleep(rng.random() * 0.5)
            failures = 0
            while not stop.is_set():
                try:
                    out = await c.run_once()
                    failures = 0
                except Exception as exc:  # network errors and server refusals: back off and retry
                    failures += 1
                    log.debug("device %s: %s", c.device_id[:8], exc)
                    await _sleep(stop, rng.uniform(0, min(30.0, 0.5 * 2**failures)))
                    continue
                stats.record(out)
                if out.status in ("idle", "paused"):
                    await _sleep(stop, out.retry_after)
                elif out.status == "dropped":
                    await _sleep(stop, 30.0)  # offline for a while: the cohort goes on without it

        async def watchdog() -> None:
            while not stop.is_set():
                await asyncio.sleep(0.5)
                if until_idle and stats.queries_running == 0 and time.monotonic() - stats.last_assignment > idle_s:
                    stop.set()
                if parent_pid is not None and os.getppid() != parent_pid:
                    stop.set()  # the fa-sim parent is gone: do not keep polling as an orphan

        tasks = [asyncio.create_task(one(c)) for c in clients]
        wd = asyncio.create_task(watchdog())
        await stop.wait()
        for t in tasks + [wd]:
            t.cancel()
        await asyncio.gather(*tasks, wd, return_exceptions=True)
    return stats


async def _sleep(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), max(0.0, seconds))
    except TimeoutError:
        pass


def truth_of(devices: Sequence[tuple[bytes, dict[str, list[Any]]]]) -> dict[str, dict[str, list[Any]]]:
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    from queries.envelope import device_id_for

    out = {}
    for key, data in devices:
        pub = Ed25519PrivateKey.from_private_bytes(key).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        out[device_id_for(pub)] = data
    return out


def write_truth(path: str | Path, scenario: str, seed: int, devices: Sequence[tuple[bytes, dict[str, list[Any]]]]) -> None:
    payload = {"scenario": scenario, "seed": seed, "devices": truth_of(devices)}
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(json.dumps(payload))
    tmp.replace(path)


def _child(
    args: tuple[str, list[tuple[bytes, dict[str, list[Any]]]], float, int, bool, float, float, int, bool, bool,
                dict[str, Any] | None, list[Enrolment] | None],
) -> dict[str, int]:
    server, devices, dropout, seed, until_idle, idle_s, wait_s, parent, seeded, split, policy, enrolments = args
    stats = asyncio.run(
        run_fleet(server, devices, dropout, seed, until_idle, idle_s, wait_s, parent_pid=parent, seeded_randomness=seeded,
                  split=split, policy=policy, enrolments=enrolments)
    )
    return stats.outcomes


def run_fleet_processes(
    server: str,
    devices: Sequence[tuple[bytes, dict[str, list[Any]]]],
    processes: int,
    dropout: float,
    seed: int,
    until_idle: bool,
    idle_s: float,
    checkin_wait_s: float,
    seeded_randomness: bool = False,
    split: bool = False,
    policy: dict[str, Any] | None = None,
    enrolments: Sequence[Enrolment] | None = None,
) -> dict[str, int]:
    chunks = [list(devices[i::processes]) for i in range(processes)]
    enrolled = [list(enrolments[i::processes]) if enrolments else None for i in range(processes)]
    ctx = mp.get_context("spawn")
    stopped = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stopped.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    pool = ctx.Pool(processes)
    results: list[dict[str, int]] = []
    try:
        pending = pool.map_async(
            _child,
            [
                (server, c, dropout, seed * 1000 + i, until_idle, idle_s, checkin_wait_s, os.getpid(), seeded_randomness,
                 split, policy, enrolled[i])
                for i, c in enumerate(chunks)
            ],
        )
        while not pending.ready() and not stopped.is_set():
            pending.wait(0.5)
        if pending.ready():
            results = pending.get()
    finally:
        pool.terminate()
        pool.join()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    total: dict[str, int] = {}
    for r in results:
        for k, v in r.items():
            total[k] = total.get(k, 0) + v
    return total
