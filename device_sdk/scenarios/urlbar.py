"""Simulated browser histories for the frecency example of the `training` kind (simulation data only).

Registers the scenario `frecency`: collection `urlbar`, the URL-bar interactions of one simulated browser
per device (queries.training.urlbar_sim).
"""

from __future__ import annotations

import numpy as np

from device_sdk.scenarios.registry import Rows, scenario


@scenario("frecency", "URL-bar interactions of one simulated browser history (queries.training.urlbar_sim): "
          "collection urlbar")
def _frecency(rng: np.random.Generator, i: int) -> Rows:
    from queries.training import urlbar_sim

    return {"urlbar": urlbar_sim.make_device_rows(rng, n_interactions=10)}
