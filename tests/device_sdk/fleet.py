"""An in-process fleet of real `DeviceClient`s against the real app over HTTP, for the device-policy tests."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer

from analytics_server.state import STATE
from device_sdk import (Callbacks, ClientOptions, DeviceClient, DevicePolicy, Enrolment, LocalStore, NetworkOptions,
                        Outcome)
from device_sdk.hooks import DeviceHooks


class CountingStore(LocalStore):
    """A LocalStore that records which collections were read (`rows`), to prove a refusal read nothing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reads: list[str] = []

    def rows(self, collection: str) -> list[Any]:
        self.reads.append(collection)
        return super().rows(collection)


@dataclass
class Device:
    client: DeviceClient
    store: CountingStore
    outcomes: list[Outcome] = field(default_factory=list)
    refusals: list[Any] = field(default_factory=list)
    contributions: list[Any] = field(default_factory=list)


class Fleet:
    """Devices that each run `run_once` in a loop (recording outcomes) until `stop()`."""

    def __init__(self, server: TestServer, http: aiohttp.ClientSession) -> None:
        self.server = server
        self.url = str(server.make_url(""))
        self.http = http
        self.devices: list[Device] = []
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def add(self, rows: list[Any], policy: DevicePolicy | None = None, source: str = "words",
            store: CountingStore | None = None, hooks: DeviceHooks | None = None,
            enrolment: Enrolment | None = None) -> Device:
        """A device holding `rows` in `source`; with `store`, the device that store belongs to (its rows, keys and
        logs as they are)."""
        if store is None:
            store = CountingStore()
            store.add_many(source, rows)
        refusals: list[Any] = []
        contributions: list[Any] = []
        options = ClientOptions(
            policy=policy or DevicePolicy(), network=NetworkOptions(session=self.http, checkin_wait_s=1),
            callbacks=Callbacks(on_refusal=refusals.append, on_contribution=contributions.append),
            hooks=hooks or DeviceHooks(), enrolment=enrolment)
        dev = Device(DeviceClient(self.url, store, options), store, refusals=refusals, contributions=contributions)
        self.devices.append(dev)
        self._tasks.append(asyncio.create_task(self._loop(dev)))
        return dev

    async def _loop(self, dev: Device) -> None:
        while not self._stop.is_set():
            try:
                out = await dev.client.run_once()
            except (aiohttp.ClientError, asyncio.TimeoutError):
                await asyncio.sleep(0.2)
                continue
            dev.outcomes.append(out)
            if out.status in ("idle", "paused"):
                try:
                    await asyncio.wait_for(self._stop.wait(), min(out.retry_after, 0.5))
                except TimeoutError:
                    pass

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)


async def analyst(server: TestServer) -> dict[str, str]:
    token = await server.app[STATE].store.tokens.create("admin")
    return {"Authorization": f"Bearer {token}"}


async def run_query(http: aiohttp.ClientSession, url: str, spec: dict[str, Any], hdr: dict[str, str],
                    timeout_s: float = 60) -> dict[str, Any]:
    """Submit `spec` and poll until it ends; its final status (with `result` when it succeeded)."""
    r = await http.post(url + "/v1/queries", json=spec, headers=hdr)
    assert r.status == 201, await r.text()
    return await query_end(http, url, (await r.json())["id"], hdr, timeout_s)


async def query_end(http: aiohttp.ClientSession, url: str, qid: str, hdr: dict[str, str],
                    timeout_s: float = 60) -> dict[str, Any]:
    """Poll query `qid` until it ends; its final status (with `result` when it succeeded)."""
    status: dict[str, Any] = {}
    for _ in range(int(timeout_s * 10)):
        status = await (await http.get(f"{url}/v1/queries/{qid}", headers=hdr)).json()
        if status["status"] not in ("pending", "running"):
            break
        await asyncio.sleep(0.1)
    if status["status"] == "succeeded":
        status["result"] = await (await http.get(f"{url}/v1/queries/{qid}/result", headers=hdr)).json()
    return status


async def metric(http: aiohttp.ClientSession, url: str, name: str, labels: str = "") -> float:
    """The value of one series of /metrics (summed over the process label)."""
    text = await (await http.get(url + "/metrics")).text()
    pattern = re.compile(rf"^{re.escape(name)}\{{{re.escape(labels)}[^}}]*\}} (\S+)$" if labels else
                         rf"^{re.escape(name)}(?:\{{[^}}]*\}})? (\S+)$", re.M)
    return sum(float(v) for v in pattern.findall(text))


def wait_for(predicate: Callable[[], bool]) -> Callable[[], Any]:
    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0.05)

    return poll
