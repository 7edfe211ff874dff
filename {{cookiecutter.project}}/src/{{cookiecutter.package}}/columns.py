"""A table column's values read as numbers or as categories, the same way for features and for
targets, in training and in prediction. pandas only."""

import numpy as np
import pandas as pd

from .console import UserError


def category(value) -> str:
    """A categorical value as text: 3, 3.0 and "3" are the same category."""
    if isinstance(value, float | np.floating) and float(value).is_integer():
        return str(int(value))
    return str(value)


def categories(values: pd.Series) -> pd.Series:
    """Each present value as its category; missing ones stay missing."""
    return values.map(category, na_action="ignore")


def numeric_column(values: pd.Series, name: str) -> pd.Series | None:
    """The column as float64, or None if it holds text that is not numbers (a categorical one)."""
    if values.dtype.kind in "biuf":
        return values.astype("float64")
    if values.dtype.kind != "O":  # text, categories or mixed objects pass on to parsing
        raise UserError(
            f"column {name!r} holds {values.dtype} values; convert it to numbers or text, "
            "or leave it out of data.features"
        )
    present = values.dropna()
    parsed = pd.to_numeric(present, errors="coerce")
    if len(present) and parsed.isna().all():
        return None
    if parsed.isna().any():
        bad = present[parsed.isna()].iloc[0]
        raise UserError(
            f"column {name!r} holds numbers and text such as {bad!r}; fix those values, leave "
            f"them empty if missing, or add {name} to data.categorical"
        )
    return pd.to_numeric(values, errors="coerce")


def positions(labels: pd.Series, vocabulary: list[str]) -> np.ndarray:
    """Each label's position in `vocabulary`; labels outside it get the slot after the last."""
    slots = {value: index for index, value in enumerate(vocabulary)}
    return labels.map(slots).fillna(len(slots)).to_numpy(np.int64)
