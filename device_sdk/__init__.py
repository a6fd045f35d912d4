"""Device SDK: `LocalStore` (named collections in an SQLite file), `DeviceClient` (check-in, secure
aggregation over HTTP), the fleet simulator (`fa-sim`) and the analyst CLI (`fa`)."""

from device_sdk.client import DeviceClient, Outcome
from device_sdk.store import LocalStore

__all__ = ["DeviceClient", "LocalStore", "Outcome"]
