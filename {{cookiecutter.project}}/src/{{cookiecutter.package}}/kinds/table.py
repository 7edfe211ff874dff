"""Tables: rows of named columns, numeric ones standardized and categorical ones one-hot
encoded over their training vocabulary, missing values filled in. pandas and numpy only."""

import math
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import pandas as pd
from pydantic import ConfigDict, Field, StrictStr, TypeAdapter, create_model

from ..columns import categories, numeric_column, positions
from ..console import UserError
from ..contract import Model
from ..contract import Preprocessing as BasePreprocessing
from . import Number, arrays

SUFFIXES = (".csv", ".parquet", ".pq")
READERS: dict[str, Callable[[Path], pd.DataFrame]] = {
    ".csv": pd.read_csv,
    ".parquet": pd.read_parquet,
    ".pq": pd.read_parquet,
}
# An integer target with at most this many distinct values is a class label.
MAX_INTEGER_CLASSES = 20
UNKNOWN = "<unknown>"
UPLOAD = None  # no file uploads
# What a request sends, for one-line refusals.
REQUEST = 'table rows: send JSON {"rows": [{...}]}'


class Numeric(Model):
    name: str
    kind: Literal["numeric"] = "numeric"
    mean: float
    std: float
    fill: float


class Categorical(Model):
    name: str
    kind: Literal["categorical"] = "categorical"
    vocabulary: list[str]
    fill: str


class Preprocessing(BasePreprocessing):
    """Each column in order, and the encoded features the model sees, in order."""

    columns: list[Annotated[Numeric | Categorical, Field(discriminator="kind")]]
    features: list[str]
    fill: dict[str, str] = {
        "numeric": "training mean",
        "categorical": "most frequent training value",
    }
    unknown: str = UNKNOWN

    @property
    def names(self) -> list[str]:
        return [column.name for column in self.columns]


def input_shape(preprocessing: Preprocessing) -> list[int]:
    return [len(preprocessing.features)]


def read_table(path: str | Path) -> pd.DataFrame:
    """A CSV or Parquet file, chosen by its suffix."""
    path = Path(path)
    reader = READERS.get(path.suffix.lower())
    if reader is None:
        raise UserError(f"{path} is neither .csv nor .parquet; save the table as one of them")
    if not path.is_file():
        raise UserError(f"{path} does not exist; pass the path of a .csv or .parquet file")
    try:
        frame = reader(path)
    except pd.errors.EmptyDataError:
        frame = pd.DataFrame()
    except (ValueError, OSError, pd.errors.ParserError) as error:
        reason = str(error).strip().split("\n")[0]
        raise UserError(f"{path} is not a readable table: {reason}") from None
    if frame.empty:
        raise UserError(f"{path} holds no rows; expected a header line and one row per sample")
    return frame


def require_columns(frame: pd.DataFrame, columns: list[str], source: str) -> None:
    missing = [column for column in columns if column not in frame.columns]
    if missing:
        raise UserError(
            f"{source} has no column {missing[0]!r}; its columns: {', '.join(map(str, frame))}"
        )


# Fitting


def fit(frame: pd.DataFrame, columns: list[str], categorical: list[str]) -> Preprocessing:
    """Preprocessing from the training rows: numeric columns standardized (missing values: the
    training mean), categorical ones one-hot over their training vocabulary plus one slot for
    values not seen in training (missing values: the most frequent training value)."""
    specs: list[Numeric | Categorical] = []
    features: list[str] = []
    for name in columns:
        values = frame[name]
        numbers = None if name in categorical else numeric_column(values, name)
        if numbers is not None:
            mean, std = numbers.mean(), numbers.std(ddof=0)
            mean = 0.0 if math.isnan(mean) else float(mean)
            std = 1.0 if math.isnan(std) or std == 0 else float(std)
            specs.append(Numeric(name=name, mean=mean, std=std, fill=mean))
            features.append(name)
            continue
        present = categories(values.dropna())
        vocabulary = sorted(present.unique())
        fill = str(present.value_counts().idxmax()) if len(present) else UNKNOWN
        specs.append(Categorical(name=name, vocabulary=vocabulary, fill=fill))
        features += [f"{name}={value}" for value in [*vocabulary, UNKNOWN]]
    return Preprocessing(columns=specs, features=features)


def fit_target(values: pd.Series, name: str, task: str | None, units: str | None, train):
    """What the target column asks of the model. `task` null: text and booleans are class
    labels, and so are integers with at most MAX_INTEGER_CLASSES distinct values (the class
    names are the values, sorted); other numbers are a regression target, standardized with the
    mean and std of the `train` rows."""
    from ..targets import classification, regression

    if values.isna().any():
        row = int(np.flatnonzero(values.isna())[0])
        raise UserError(
            f"target column {name!r} is empty in {values.isna().sum()} rows (the first: row "
            f"{row}); fill or drop those rows"
        )
    kind = values.dtype.kind
    integers = kind in "iu" or (kind == "f" and bool((values % 1 == 0).all()))
    if task is None:
        labels = kind in "bO" or (integers and values.nunique() <= MAX_INTEGER_CLASSES)
        task = "classification" if labels else "regression"
    if task == "regression":
        return regression.fit(values, name, units, train)
    return classification.fit_column(values, name)


# Encoding


def encode(frame: pd.DataFrame, preprocessing: Preprocessing, source: str = "the table"):
    """Rows as the model's float32 input (N, F). Columns are matched by name, in any order;
    columns the model does not use are ignored."""
    require_columns(frame, preprocessing.names, source)
    encoded = np.empty((len(frame), len(preprocessing.features)), dtype=np.float32)
    start = 0
    for spec in preprocessing.columns:
        values = frame[spec.name]
        if isinstance(spec, Numeric):
            numbers = numeric_column(values, spec.name)
            if numbers is None:
                raise UserError(
                    f"{source}: column {spec.name!r} holds text; the model was trained on "
                    "numbers there"
                )
            filled = numbers.fillna(spec.fill).to_numpy()
            encoded[:, start] = (filled - spec.mean) / spec.std
            start += 1
            continue
        slots = positions(categories(values).fillna(spec.fill), spec.vocabulary)
        width = len(spec.vocabulary) + 1
        encoded[:, start : start + width] = 0
        encoded[np.arange(len(frame)), start + slots] = 1
        start += width
    return encoded


# Prediction inputs


def from_rows(frame: pd.DataFrame, preprocessing: Preprocessing, source: str) -> np.ndarray:
    """Model inputs from table rows: columns matched by name, extra ones ignored."""
    if frame.empty:
        raise UserError(f"{source} holds no rows")
    return encode(frame, preprocessing, source)


def from_arrays(array: np.ndarray, preprocessing: Preprocessing, source: str) -> np.ndarray:
    """Model inputs from raw numbers, one column per table column in order."""
    if array.dtype.kind not in "fiu":
        raise UserError(f"{source} holds {array.dtype} values; expected raw values as numbers")
    names = preprocessing.names
    rows = array[None] if array.ndim == 1 else array
    if rows.ndim != 2 or rows.shape[1] != len(names):
        raise UserError(
            f"{source} has shape {array.shape}; expected (N, {len(names)}): the columns "
            f"{', '.join(names)}"
        )
    return from_rows(pd.DataFrame(rows, columns=names), preprocessing, source)


def read_inputs(path: Path, preprocessing: Preprocessing) -> tuple[np.ndarray, list[dict]]:
    """A .csv or .parquet table of rows."""
    if path.suffix.lower() not in SUFFIXES:
        raise UserError(
            f"input={str(path)!r}: the model takes table rows; pass a .csv or .parquet file "
            "(or a .npy array of raw numbers)"
        )
    inputs = from_rows(read_table(path), preprocessing, str(path))
    return inputs, [{"file": str(path), "index": index} for index in range(len(inputs))]


def json_forms(preprocessing: Preprocessing) -> dict:
    """Rows of every column (null where a value is missing; a categorical value may be a
    number, and columns the model does not use may come too), or raw numbers in column order."""
    value = Number | StrictStr | None
    # Field names of their own: a column's name may be anything, "_private" or "model_config".
    columns: dict = {
        f"column_{index}": (
            Number | None if isinstance(column, Numeric) else value,
            Field(alias=column.name, title=column.name),
        )
        for index, column in enumerate(preprocessing.columns)
    }
    others = TypeAdapter(value).json_schema()
    config = ConfigDict(
        extra="allow", strict=True, json_schema_extra={"additionalProperties": others}
    )
    row = create_model("Row", __config__=config, __doc__="One table row.", **columns)
    width = len(preprocessing.names)
    return {
        "rows": Annotated[list[row], Field(min_length=1)],  # type: ignore[valid-type]
        "inputs": arrays((None, width), (width,)),
    }


def from_json(payload: dict, preprocessing: Preprocessing) -> np.ndarray:
    """`{"rows": [{column: value}]}`, or `{"inputs": [[numbers]]}` in column order."""
    if "inputs" in payload:
        try:
            values = np.asarray(payload["inputs"])
        except ValueError:  # ragged
            raise UserError("inputs must be an array of numbers, every row as long") from None
        return from_arrays(values, preprocessing, "inputs")
    rows = payload.get("rows")
    if (
        not isinstance(rows, list)
        or not rows
        or not all(isinstance(row, dict) for row in rows)
        or any(isinstance(value, dict | list) for row in rows for value in row.values())
    ):
        raise UserError(
            'rows must be a list of objects {"column": value}, values numbers, text or null'
        )
    # A column a row leaves out, or gives as null, is missing in it.
    return from_rows(pd.DataFrame(rows), preprocessing, "rows")


def form(preprocessing: Preprocessing) -> dict:
    fields = []
    for column in preprocessing.columns:
        field: dict[str, object] = {"name": column.name, "kind": column.kind}
        if isinstance(column, Categorical):
            field["vocabulary"] = column.vocabulary
        fields.append(field)
    return {
        "type": "fields",
        "fields": fields,
        "about": "Input: one table row; a field left empty is a missing value.",
    }


def check(preprocessing: Preprocessing, shape: list, where: str) -> None:
    if input_shape(preprocessing) != shape:
        raise UserError(
            f"{where} encodes {len(preprocessing.features)} features, the model takes {shape}"
        )
    for column in preprocessing.columns:
        if isinstance(column, Numeric) and not (math.isfinite(column.std) and column.std > 0):
            raise UserError(
                f"{where} has preprocessing column {column.name!r} std {column.std}; it must "
                "be positive"
            )
