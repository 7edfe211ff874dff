"""Regression: the model gives one number, the target standardized with the training split's
mean and std; predictions are in the target's own units, and export judges a format by R²."""

from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel

from ..console import UserError
from ..contract import Target as BaseTarget

if TYPE_CHECKING:  # tables only, in training: predicting images imports no pandas
    import pandas as pd

COLUMNS = ["value"]
HINT = "pass model=regressor, or data.task=classification to read it as class labels"


class Target(BaseTarget):
    task: str = "regression"
    name: str
    mean: float
    std: float
    units: str | None = None


def fit(values: "pd.Series", name: str, units: str | None, train=None) -> Target:
    """The target's standardization, from the `train` rows (all rows if None)."""
    from ..columns import numeric_column

    labels = "(data.task=classification reads it as class labels)"
    fix = f"fix them: a regression target must be numbers {labels}"
    numbers = None if values.dtype.kind == "b" else numeric_column(values, name, "target ", fix)
    if numbers is None:
        raise UserError(
            f"target column {name!r} holds text: a regression target must be numbers {labels}"
        )
    fitted = numbers if train is None else numbers.iloc[train]
    mean, std = float(fitted.mean()), float(fitted.std(ddof=0))
    if not std > 0:
        raise UserError(
            f"target column {name!r} is {mean} in every training row: nothing to learn"
        )
    return Target(name=name, mean=mean, std=std, units=units)


class Prediction(BaseModel):
    """One sample's answer, as `decode` makes it and the HTTP API documents it."""

    value: float


def encode(values: "pd.Series", target: Target) -> np.ndarray:
    """The values standardized (float32)."""
    from ..columns import numeric_column

    trained = "the model was trained on numbers there"
    numbers = numeric_column(values, target.name, "target ", f"fix them: {trained}")
    if numbers is None:
        raise UserError(f"target column {target.name!r} holds text; {trained}")
    return ((numbers.to_numpy() - target.mean) / target.std).astype(np.float32)


def outputs(target: Target) -> int:
    return 1


def decode(values: np.ndarray, target: Target, top_k: int = 1) -> list[dict]:
    """Each sample's value in the target's units; `top_k` means nothing here."""
    return [{"value": round(float(v), 6)} for v in values[:, 0] * target.std + target.mean]


def metric(outputs: np.ndarray, targets: np.ndarray) -> dict[str, float]:
    """R² of the standardized value: standardizing both sides leaves it unchanged."""
    predicted, targets = outputs[:, 0].astype(np.float64), targets.astype(np.float64)
    residual = ((targets - predicted) ** 2).sum()
    return {"test/r2": float(1 - residual / ((targets - targets.mean()) ** 2).sum())}


def parity(outputs: np.ndarray, expected: np.ndarray) -> dict[str, float]:
    return {}


def rows(prediction: dict) -> list[list[str]]:
    return [[f"{prediction['value']:.6g}"]]
