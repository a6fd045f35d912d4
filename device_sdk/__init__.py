"""Device SDK: `LocalStore` (named collections in an SQLite file, with retention and opt-out),
`DeviceClient` (`DeviceClient(server_url, store, ClientOptions(...))`; check-in, secure aggregation over HTTP; `start()`/`stop()` in a background thread or the async
`run_once()`/`run_forever()`), `DevicePolicy` (the device's own privacy limits, checked on the device). What an
app ships, nothing else: the analyst client and CLI (`fa`) are the `analyst_client` package and the fleet simulator
(`fa-sim`) is `fleet_sim`. See docs/device_sdk.md.

`register_scoring_function` registers an app's ranking function by name so the server can tune its
parameters (black-box training by finite differences, see docs/frecency.md)."""

from device_sdk.client import DeviceClient, Outcome
from device_sdk.identity import Enrolment, EnrolmentError
from device_sdk.ledger import ContributionRecord
from device_sdk.options import Callbacks, ClientOptions, NetworkOptions
from device_sdk.policy import DevicePolicy, PolicyError, Refusal
from device_sdk.store import LocalStore, StoreError
from queries.training.blackbox import register_scoring_function

__all__ = [
    "Callbacks",
    "ClientOptions",
    "ContributionRecord",
    "DeviceClient",
    "DevicePolicy",
    "Enrolment",
    "EnrolmentError",
    "LocalStore",
    "NetworkOptions",
    "Outcome",
    "PolicyError",
    "Refusal",
    "StoreError",
    "register_scoring_function",
]
