"""A table column's values read as numbers, dates or categories, the same way for features and
for targets, in training and in prediction. pandas only."""

import warnings

import numpy as np
import pandas as pd
from pandas.tseries.api import guess_datetime_format

from .console import UserError


def category(value) -> str:
    """A categorical value as text: 3, 3.0 and "3" are the same category."""
    if isinstance(value, float | np.floating) and float(value).is_integer():
        return str(int(value))
    return str(value)


def categories(values: pd.Series) -> pd.Series:
    """Each present value as its category; missing ones stay missing."""
    return values.map(category, na_action="ignore")


def numeric_column(
    values: pd.Series, name: str, where: str = "", fix: str | None = None
) -> pd.Series | None:
    """The column as float64, or None if it holds text that is not numbers (a categorical one).
    A value that is neither is refused, the line starting with `where` the rows come from and
    ending with `fix`, what to do about it: by default, a training feature's settings to change
    (a target's, or a trained model's input, cannot be changed so)."""
    if values.dtype.kind in "biuf":
        return values.astype("float64")
    if values.dtype.kind != "O":  # text, categories or mixed objects pass on to parsing
        fix = fix or "convert it to numbers or text, or leave it out of data.features"
        raise UserError(f"{where}column {name!r} holds {values.dtype} values; {fix}")
    present = values.dropna()
    parsed = pd.to_numeric(present, errors="coerce")
    if len(present) and parsed.isna().all():
        return None
    if parsed.isna().any():
        bad = present[parsed.isna()].iloc[0]
        fix = fix or f"fix them, leave them empty if missing, or add {name} to data.categorical"
        raise UserError(f"{where}column {name!r} holds numbers and text such as {bad!r}; {fix}")
    return pd.to_numeric(values, errors="coerce")


def nested(values: pd.Series) -> object | None:
    """The first list, array or struct (dict) the column holds, as Parquet's nested columns
    read; None if it holds none."""
    if values.dtype.kind != "O":
        return None
    found = values[values.map(lambda value: isinstance(value, list | tuple | dict | np.ndarray))]
    return found.iloc[0] if len(found) else None


def date_format(values: pd.Series) -> str | None:
    """How the column's values read as dates: "ISO8601" for a column of datetimes (Parquet's),
    the format of its text if its first value is a date with a year, a month and a day, or None:
    no dates. A date such as 01/03/2024 reads month first, unless some value reads only day
    first (25/03/2024)."""
    if values.dtype.kind == "M":
        return "ISO8601"
    present = values.dropna()
    if values.dtype.kind != "O" or not len(present) or not isinstance(present.iloc[0], str):
        return None
    with warnings.catch_warnings():  # of a guess of the day first, which is tried below too
        warnings.simplefilter("ignore", UserWarning)
        form = guess_datetime_format(present.iloc[0]) or ""
    months = ("%m", "%b", "%B")
    if "%Y" not in form or "%d" not in form or not any(month in form for month in months):
        return None
    # Year first is year, month, day; otherwise the day may come first.
    for candidate in (form,) if form.startswith("%Y") else (form, day_first(form)):
        if pd.to_datetime(present, format=candidate, errors="coerce").notna().all():
            return candidate
    return form  # the values that do not read so are refused when they are read


def day_first(form: str) -> str:
    """A date format with the day and the month in each other's place."""
    return form.replace("%m", "\0").replace("%d", "%m").replace("\0", "%d")


def read_either_way(values: pd.Series, form: str) -> bool:
    """Whether every date of a column in `form`, month first, also reads day first (01/03/2024
    and 02/03/2024): then nothing in them says which they are."""
    if form.startswith("%Y") or "%m" not in form or values.dtype.kind != "O":
        return False
    present = values.dropna().map(str)
    return bool(pd.to_datetime(present, format=day_first(form), errors="coerce").notna().all())


def datetimes(values: pd.Series, name: str, form: str, source: str = "the table") -> pd.Series:
    """The column as timestamps, those with a time zone in UTC; missing values stay missing
    (NaT). Text that does not read in `form` is read as ISO 8601 (what a page's date field
    sends), and refused in one line if it is no date that way either."""
    if values.dtype.kind == "M":
        times = values
    else:
        text = values.map(str, na_action="ignore")
        times = pd.to_datetime(text, format=form, errors="coerce", utc=True)
        other = times.isna() & text.notna()
        if other.any():
            iso = pd.to_datetime(text[other], format="ISO8601", errors="coerce", utc=True)
            times = times.mask(other, iso)
        bad = times.isna() & text.notna()
        if bad.any():
            raise UserError(
                f"{source}: column {name!r} holds {values[bad].iloc[0]!r} in row {bad.idxmax()}, "
                f"which is no date as its others are ({form}); fix it, or leave it empty if "
                "missing"
            )
    return times.dt.tz_convert(None) if times.dt.tz is not None else times


def positions(labels: pd.Series, vocabulary: list[str]) -> np.ndarray:
    """Each label's position in `vocabulary`; labels outside it get the slot after the last."""
    slots = {value: index for index, value in enumerate(vocabulary)}
    return labels.map(slots).fillna(len(slots)).to_numpy(np.int64)
