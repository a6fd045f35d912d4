"""Simulated browser histories for the frecency example of the `training` kind (simulation data only).

Registers the scenario `frecency`: collection `urlbar`, the URL-bar interactions of one simulated browser
per device (fleet_sim.urlbar_sim).
"""

from __future__ import annotations

import numpy as np

from fleet_sim.scenarios.registry import Rows, scenario


@scenario("frecency", "URL-bar interactions of one simulated browser history (fleet_sim.urlbar_sim): "
          "collection urlbar")
def _frecency(rng: np.random.Generator, i: int) -> Rows:
    from fleet_sim import urlbar_sim

    return {"urlbar": urlbar_sim.make_device_rows(rng, n_interactions=10)}
