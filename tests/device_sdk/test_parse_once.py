"""One parse of a task per assignment on the device (issue 47): a real fleet of `DeviceClient`s against the real app
(in process) runs a noisy histogram whose cohort proves its inputs, and each device counts, in its own context, the
calls of the kind's `parse_task`, of `SecAggConfig.from_dict` and of the kind's `validity` — the policy, the
transparency-log check, the contribution, its proof and the session all take the parsed assignment."""

from __future__ import annotations

import contextvars
from collections import Counter
from typing import Any

import aiohttp
import pytest

from device_sdk import DevicePolicy
from queries.histogram import HistogramKind
from queries.kind import DeviceKind
from secagg.config import SecAggConfig
from tests.device_sdk.fleet import Fleet, analyst, run_query

WORDS = [["moon"], ["sun", "moon"], ["star"], ["moon"], ["sun"]]
SPEC = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun", "star"]},
        "privacy": {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6, "validation": "proofs"},
        "cohort": {"min_clients": 5, "max_clients": 5, "phase_timeout_s": 10}}

COUNTS: contextvars.ContextVar[Counter[str] | None] = contextvars.ContextVar("parse_counts", default=None)
"""The calls made by the device whose context this is (None: the server's, or the test's own)."""


def _counting(monkeypatch: pytest.MonkeyPatch) -> None:
    parse_task, from_dict, validity = DeviceKind.parse_task, SecAggConfig.from_dict.__func__, HistogramKind.validity  # type: ignore[attr-defined]

    def count(name: str) -> None:
        counts = COUNTS.get()
        if counts is not None:
            counts[name] += 1

    def counted_parse(self: Any, raw: Any) -> Any:
        count("parse_task")
        return parse_task(self, raw)

    def counted_from_dict(cls: Any, data: Any) -> Any:
        count("from_dict")
        return from_dict(cls, data)

    def counted_validity(self: Any, task: Any) -> Any:
        count("validity")
        return validity(self, task)

    monkeypatch.setattr(DeviceKind, "parse_task", counted_parse)
    monkeypatch.setattr(SecAggConfig, "from_dict", classmethod(counted_from_dict))
    monkeypatch.setattr(HistogramKind, "validity", counted_validity)


async def test_each_assignment_is_parsed_once_on_the_device(start_app_server, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    _counting(monkeypatch)
    server = await start_app_server()
    url = str(server.make_url(""))
    hdr = await analyst(server)
    async with aiohttp.ClientSession() as http:
        fleet = Fleet(server, http)
        counts: list[Counter[str]] = []
        for rows in WORDS:
            context = contextvars.copy_context()  # the device's loop task (and its proving thread) run in this context
            counts.append(Counter())
            context.run(COUNTS.set, counts[-1])
            context.run(fleet.add, rows, DevicePolicy(require_proofs=True))
        final = await run_query(http, url, SPEC, hdr)
        await fleet.stop()
    assert final["status"] == "succeeded", final
    assert final["result"]["result"]["clients"] == len(WORDS)
    for dev, seen in zip(fleet.devices, counts):
        assigned = sum(1 for o in dev.outcomes if o.cohort_id is not None)
        assert assigned >= 1 and any(o.status == "finished" for o in dev.outcomes), dev.outcomes
        assert dev.client.transparency_log()[0].proofs  # the statement was used: the device proved its input
        assert seen == {"parse_task": assigned, "from_dict": assigned, "validity": assigned}, (seen, dev.outcomes)
