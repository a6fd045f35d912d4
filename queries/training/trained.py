"""Applying a finished `training` result: rebuild the model from the result and score new rows."""

from __future__ import annotations

from typing import Any

import numpy as np

from queries.feature_stats import StandardScaling
from queries.kind import QueryKindError
from queries.training.client import model_from_spec, parse_xy
from queries.training.models import Model


class TrainedModel:
    def __init__(self, result: dict[str, Any]) -> None:
        try:
            model = model_from_spec(result["model"])
            self.weights = np.asarray(result["weights"], dtype=np.float64)
        except (KeyError, TypeError) as exc:
            raise QueryKindError(f"result: not a training result ({exc})") from None
        if not isinstance(model, Model):
            raise QueryKindError("result: black-box models are applied through their own scoring function")
        self.model = model
        self.features = result.get("features")
        self.scaler = StandardScaling({"scaler": result["scaling"]}) if result.get("scaling") else None

    @classmethod
    def from_result(cls, result: dict[str, Any]) -> TrainedModel:
        return cls(result)

    def matrix(self, rows_or_x: Any) -> np.ndarray:
        """Rows `{"x": …}` (scaled like on the devices) or a raw feature matrix (scaled when a scaler exists)."""
        if isinstance(rows_or_x, list) and rows_or_x and isinstance(rows_or_x[0], dict):
            X, _ = parse_xy([{**r, "y": 0} for r in rows_or_x], int(getattr(self.model, "n_features")), self.features, self.scaler)
            return X
        X = np.asarray(rows_or_x, dtype=np.float64)
        return self.scaler.transform(X) if self.scaler is not None else X

    def scores(self, rows_or_x: Any) -> np.ndarray:
        return self.model.scores(self.weights, self.matrix(rows_or_x))

    def predict(self, rows_or_x: Any) -> np.ndarray:
        return self.model.predict(self.weights, self.matrix(rows_or_x))
