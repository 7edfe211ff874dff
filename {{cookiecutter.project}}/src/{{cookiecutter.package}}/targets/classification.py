"""Classification: the model gives one logit per class; predictions are the most probable
classes with their probabilities, and export judges a format by its accuracy."""

from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ..console import UserError, counted
from ..contract import Target as BaseTarget

if TYPE_CHECKING:  # tables only, in training: predicting images imports no pandas
    import pandas as pd

COLUMNS = ["class", "probability"]
HINT = "pass data.task=regression to predict it as a number, or model=classifier"


class Target(BaseTarget):
    task: str = "classification"
    class_names: list[str]
    # The column the classes come from, for tables.
    name: str | None = None


def fit(class_names: list[str], name: str | None = None) -> Target:
    if len(class_names) < 2:
        subject = f"target column {name!r}" if name else "the data"
        raise UserError(f"{subject} holds one class ({class_names[0]}); a classifier needs two")
    return Target(class_names=list(class_names), name=name)


class Ranked(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    class_: str = Field(alias="class")
    probability: float


class Prediction(Ranked):
    """One sample's answer, as `decode` makes it and the HTTP API documents it."""

    top: list[Ranked] | None = Field(None, description="The top_k classes, when top_k > 1")


def fit_column(values: "pd.Series", name: str) -> Target:
    """The classes of a target column, sorted: as text, or as numbers for numbers (2 before 10)."""
    from ..columns import category

    if values.dtype.kind in "bO":
        return fit(sorted(values.map(category).unique()), name)
    return fit([category(value) for value in sorted(values.unique())], name)


def encode(values: "pd.Series", target: Target) -> np.ndarray:
    """Class indices (int64); a value that is not one of the classes is refused in one line
    (evaluating on data of other classes: the loss cannot index a class the model lacks)."""
    from ..columns import category, positions

    labels = values.map(category)
    other = ~labels.isin(target.class_names)
    if other.any():
        subject = f"target column {target.name!r}" if target.name else "the data"
        names = target.class_names
        known = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "")
        raise UserError(
            f"{subject} holds {labels[other].iloc[0]!r} in {counted(other.sum(), 'sample')}, "
            f"a class the model was not trained on ({known}): evaluate on samples of its "
            "classes, or train a model on these"
        )
    return positions(labels, target.class_names)


def outputs(target: Target) -> int:
    return len(target.class_names)


def decode(logits: np.ndarray, target: Target, top_k: int = 1) -> list[dict]:
    """Each sample's class and probability, with the `top_k` most probable when top_k > 1."""
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    scores = exp / exp.sum(axis=1, keepdims=True)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :top_k]
    names, results = target.class_names, []
    for row, best in zip(scores.tolist(), order.tolist(), strict=True):
        ranked = [{"class": names[index], "probability": round(row[index], 6)} for index in best]
        results.append((ranked[0] | {"top": ranked}) if top_k > 1 else ranked[0])
    return results


def metric(logits: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    return {"test/acc": float((logits.argmax(1) == labels).mean())}


def parity(logits: np.ndarray, expected: np.ndarray) -> dict[str, float]:
    """How often a format picks the class the eager model picks."""
    return {"argmax_agreement": float((logits.argmax(1) == expected.argmax(1)).mean())}


def rows(prediction: dict) -> list[list[str]]:
    """predict's table: each listed class (the top_k, or the best) with its probability."""
    ranked = prediction.get("top", [prediction])
    return [[entry["class"], f"{entry['probability']:.4f}"] for entry in ranked]
