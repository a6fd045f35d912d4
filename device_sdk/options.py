"""`ClientOptions`: everything a `DeviceClient` takes besides its server URL and store, in one typed frozen object.

`DeviceClient(server_url, store, options)`. The options are grouped as the TypeScript SDK groups them (same names in
camelCase; the table in docs/device_sdk.md, "`ClientOptions`"): `network` (`NetworkOptions`: the HTTP session,
check-in long-poll, request timeout, backoff), `callbacks` (`Callbacks`: on_assignment, on_contribution, on_refusal,
on_error), and the single fields `policy`, `eligible`, `enrolment`, `keys_with_checkin`, `ineligible_poll_s`,
`randomness` and `hooks`. Every field is type-checked when the object is built: a wrong one raises `TypeError`
naming it (`options.network.checkin_wait_s: …`), so a misspelt or misplaced option fails at once, not on first use.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from device_sdk.hooks import DeviceHooks
from device_sdk.identity import Enrolment
from device_sdk.ledger import ContributionRecord
from device_sdk.policy import DevicePolicy, Refusal
from queries.envelope import Assignment
from secagg.randomness import RandomSource

Eligibility = Callable[[], bool]
"""The app's answer to "may the device take part now?" (charging, unmetered network, idle…)."""


def _seconds(where: str, value: Any, zero: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or (
            value < 0 if zero else value <= 0):
        raise TypeError(f"{where}: a finite number of seconds {'≥ 0' if zero else '> 0'}, got {value!r}")


def _instance(where: str, value: Any, cls: type, what: str) -> None:
    if not isinstance(value, cls):
        raise TypeError(f"{where}: must be {what}, got {type(value).__name__}")


def _callable(where: str, value: Any) -> None:
    if value is not None and not callable(value):
        raise TypeError(f"{where}: must be callable or None, got {type(value).__name__}")


@dataclass(frozen=True)
class NetworkOptions:
    """How the device talks to the server. `session`: an `aiohttp.ClientSession` to send requests through (None: the
    client opens its own and closes it in `close()`; `start()`/`run_once_sync()` need their own); `checkin_wait_s`:
    how long a check-in long-polls for an assignment; `request_timeout_s`: one request's timeout; `backoff_base_s`,
    `backoff_cap_s`: exponential backoff with full jitter after errors."""

    session: aiohttp.ClientSession | None = None
    checkin_wait_s: float = 10.0
    request_timeout_s: float = 120.0
    backoff_base_s: float = 0.5
    backoff_cap_s: float = 30.0

    def __post_init__(self) -> None:
        if self.session is not None:
            _instance("options.network.session", self.session, aiohttp.ClientSession, "an aiohttp.ClientSession or None")
        _seconds("options.network.checkin_wait_s", self.checkin_wait_s, zero=True)
        for name in ("request_timeout_s", "backoff_base_s", "backoff_cap_s"):
            _seconds(f"options.network.{name}", getattr(self, name))


@dataclass(frozen=True)
class Callbacks:
    """What the app hears of: each runs on the client's thread, must not block, and an exception in it is logged,
    never raised (docs/device_sdk.md, "Callbacks and logging")."""

    on_assignment: Callable[[Assignment], Any] | None = None
    on_contribution: Callable[[ContributionRecord], Any] | None = None
    on_refusal: Callable[[Refusal], Any] | None = None
    on_error: Callable[[BaseException], Any] | None = None

    def __post_init__(self) -> None:
        for name in ("on_assignment", "on_contribution", "on_refusal", "on_error"):
            _callable(f"options.callbacks.{name}", getattr(self, name))


@dataclass(frozen=True)
class ClientOptions:
    """A `DeviceClient`'s options (module docstring); the defaults are an app's device.

    - `policy`: the device's own limits (`DevicePolicy`, docs/device_sdk.md);
    - `eligible`: asked before every check-in and again before a cohort starts; the device takes part only while it
      returns True (None: always);
    - `network`, `callbacks`: the groups above;
    - `enrolment`: the identity issuer to obtain a token from before registering (docs/identities.md);
    - `keys_with_checkin`: send fresh secagg public keys with every check-in, so a cohort's first phase costs no
      request of its own (docs/protocol.md, "Keys with the check-in");
    - `ineligible_poll_s`: how often a paused device (not eligible, opted out) asks again;
    - `randomness`: the device's one random source (OS entropy by default; a seeded one only in tests);
    - `hooks`: what a simulator or a benchmark injects (`device_sdk.hooks.DeviceHooks`); an app leaves it out.
    """

    policy: DevicePolicy = field(default_factory=DevicePolicy)
    eligible: Eligibility | None = None
    network: NetworkOptions = field(default_factory=NetworkOptions)
    callbacks: Callbacks = field(default_factory=Callbacks)
    enrolment: Enrolment | None = None
    keys_with_checkin: bool = True
    ineligible_poll_s: float = 60.0
    randomness: RandomSource | None = None
    hooks: DeviceHooks = field(default_factory=DeviceHooks)

    def __post_init__(self) -> None:
        _instance("options.policy", self.policy, DevicePolicy, "a DevicePolicy")
        if self.eligible is not None and not callable(self.eligible):
            raise TypeError("options.eligible: must be a callable returning True or False")
        _instance("options.network", self.network, NetworkOptions, "a NetworkOptions")
        _instance("options.callbacks", self.callbacks, Callbacks, "a Callbacks")
        if self.enrolment is not None:
            _instance("options.enrolment", self.enrolment, Enrolment, "an Enrolment")
        if not isinstance(self.keys_with_checkin, bool):
            raise TypeError(f"options.keys_with_checkin: must be True or False, got {self.keys_with_checkin!r}")
        _seconds("options.ineligible_poll_s", self.ineligible_poll_s, zero=True)
        if self.randomness is not None:
            _instance("options.randomness", self.randomness, RandomSource, "a secagg.randomness.RandomSource")
        _instance("options.hooks", self.hooks, DeviceHooks, "a DeviceHooks")


__all__ = ["Callbacks", "ClientOptions", "Eligibility", "NetworkOptions"]
