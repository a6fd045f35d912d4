"""The analyst's product: `AnalystClient` (the analyst HTTP API from Python, `analyst_client.client`), the `fa`
CLI (`analyst_client.cli`) and its text views (`analyst_client.view`). Installed with the `analyst` extra
(`pip install fed-analytics[analyst]`); nothing here runs on a device or in the server. See docs/analyst.md."""

from analyst_client.client import AnalystClient, ApiError, frame

__all__ = ["AnalystClient", "ApiError", "frame"]
