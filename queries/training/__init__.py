"""Federated model training (`training` query kind): numpy models, server optimisers, black-box models.

Modules: `params` (analyst spec), `models` (hand-differentiated numpy models + `register_model`),
`blackbox` (loss/scoring functions trained by finite differences + `register_scoring_function`),
`finite_diff`, `optimizers` (fedavg, FedAdam, Rprop, safeguards), `encoding` (vector layouts and true
bounds), `client` (device side), `kind` (server side), `trained` (applying a result), `frecency` (the Firefox
URL-bar ranking function; its simulated browsers are `fleet_sim.urlbar_sim`). Importing the package registers the `frecency`
scoring function; `queries.registry` lists the kind. See docs/training.md and docs/frecency.md.
"""

from queries.training import frecency as frecency  # noqa: F401  (registers the frecency scoring function)
from queries.training.blackbox import BlackBoxModel, Metric, register_blackbox, register_scoring_function
from queries.training.kind import TrainingKind, TrainingState
from queries.training.models import Model, register_model
from queries.training.params import TrainingParams
from queries.training.trained import TrainedModel

__all__ = [
    "BlackBoxModel",
    "Metric",
    "Model",
    "TrainedModel",
    "TrainingKind",
    "TrainingParams",
    "TrainingState",
    "register_blackbox",
    "register_model",
    "register_scoring_function",
]
