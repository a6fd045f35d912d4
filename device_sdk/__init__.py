"""Device SDK: `LocalStore` (named collections in an SQLite file), `DeviceClient` (check-in, secure
aggregation over HTTP), the fleet simulator (`fa-sim`) and the analyst CLI (`fa`).

`register_scoring_function` registers an app's ranking function by name so the server can tune its
parameters (black-box training by finite differences, see docs/frecency.md)."""

from device_sdk.client import DeviceClient, Outcome
from device_sdk.store import LocalStore
from queries.training.blackbox import register_scoring_function

__all__ = ["DeviceClient", "LocalStore", "Outcome", "register_scoring_function"]
