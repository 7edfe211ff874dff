"""Tables: rows of named columns, numeric ones standardized, dates and times as the numbers of
their parts (year, month, ...) standardized, and categorical ones one-hot encoded over their
training vocabulary; missing values filled in. pandas and numpy only."""

import csv
import json
import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import pandas as pd
from pydantic import (
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    TypeAdapter,
    create_model,
    model_validator,
)

from ..columns import categories, date_format, datetimes, nested, numeric_column, positions
from ..console import UserError
from ..contract import Model
from ..contract import Preprocessing as BasePreprocessing
from . import TABLE_SUFFIXES, Number, arrays, number_array


def read_json_lines(path: Path) -> pd.DataFrame:
    # Values as JSON has them: text that looks like a date or a number stays text, and numbers
    # are read exactly (pandas' faster parser may change their last digits).
    try:
        return pd.read_json(path, lines=True, dtype=False, precise_float=True)
    except TypeError:  # pandas' words for a line of JSON that is not an object name no line
        rows = json_rows(path)
        line = next((number for number, row in rows if not isinstance(row, dict)), None)
        if line is None:
            raise
        raise UserError(
            f"{path} line {line} is not a JSON object; expected one object per line, "
            '{"column": value, ...}, one per sample'
        ) from None


def json_rows(path: Path) -> Iterator[tuple[int, object]]:
    """Each line that holds JSON, with its number (from 1), as json reads it."""
    with path.open(encoding="utf-8") as file:
        for number, line in enumerate(file, 1):
            if line.strip():
                yield number, json.loads(line)


# What pandas reads as a missing value in a CSV besides an empty field (its defaults).
MISSING_MARKS = [
    "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
    "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null",
]  # fmt: skip


def read_csv(path: Path) -> pd.DataFrame:
    """A CSV file whose empty fields are missing values; so are the other marks of one (NA,
    None, null, ...) in a column of numbers or dates. In a column of text they are words, as
    JSON has them: the region NA, the class None."""
    frame = pd.read_csv(path, keep_default_na=False, na_values=[""])
    for name in frame.columns:
        if frame[name].dtype.kind == "O":
            frame[name] = unmarked(frame[name])
    return frame


def unmarked(values: pd.Series) -> pd.Series:
    marks = values.isin(MISSING_MARKS)
    if not marks.any():
        return values
    rest = values[~marks].dropna()
    if pd.to_numeric(rest, errors="coerce").notna().all():
        return pd.to_numeric(values.mask(marks), errors="coerce")
    if date_format(rest) is not None:
        return values.mask(marks)
    return values


READERS: dict[str, Callable[[Path], pd.DataFrame]] = {
    ".csv": read_csv,
    ".parquet": pd.read_parquet,
    ".pq": pd.read_parquet,
    ".jsonl": read_json_lines,
}
TABLE_FILES = ".csv, .parquet or .jsonl"  # for the lines that ask for one
# An integer target with at most this many distinct values is a class label.
MAX_INTEGER_CLASSES = 20
# A text column with more distinct values than this, and than half its training rows, names
# rows rather than sorting them (a customer ID): one-hot, it would be a feature per row; as the
# target, most classes would have no training row, and the model could not be right.
MAX_IDENTIFIER_VALUES = 20
UNKNOWN = "<unknown>"
# A column name that Hydra's grammar reads as it is in a list, unquoted.
PLAIN_NAME = re.compile(r"[A-Za-z_][\w.-]*", re.ASCII)
# The parts of a date that become features (pandas' names); those of a time of day only if the
# training values have one.
Part = Literal["year", "month", "day", "day_of_week", "day_of_year", "hour", "minute"]
DATE_PARTS: list[Part] = ["year", "month", "day", "day_of_week", "day_of_year"]
TIME_PARTS: list[Part] = ["hour", "minute"]
DTYPE = "float32"  # what the model takes
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


class Datetime(Model):
    """Dates or times, encoded as the numbers of their `parts` (pandas' names), each
    standardized with its training `mean` and `std`. Text is read in `format` (a strftime
    format, or ISO8601), or as ISO 8601."""

    name: str
    kind: Literal["datetime"] = "datetime"
    format: str
    parts: list[Part]
    mean: list[float]
    std: list[float]

    @model_validator(mode="after")
    def one_mean_and_std_per_part(self) -> "Datetime":
        if not len(self.parts) == len(self.mean) == len(self.std):
            raise ValueError("parts, mean and std must be as long as each other")
        return self


Column = Annotated[Numeric | Categorical | Datetime, Field(discriminator="kind")]


class Preprocessing(BasePreprocessing):
    """Each column in order, and the encoded features the model sees, in order."""

    columns: list[Column]
    features: list[str]
    fill: dict[str, str] = {
        "numeric": "training mean",
        "categorical": "most frequent training value",
        "datetime": "training mean of each part",
    }
    unknown: str = UNKNOWN

    @property
    def names(self) -> list[str]:
        return [column.name for column in self.columns]


def input_shape(preprocessing: Preprocessing) -> list[int]:
    return [len(preprocessing.features)]


def not_utf8(path: Path, error: UnicodeDecodeError) -> UserError:
    byte = error.object[error.start]
    return UserError(f"{path} is not UTF-8 text (it holds the byte {byte:#x}); save it as UTF-8")


def read_table(path: str | Path) -> pd.DataFrame:
    """A CSV, Parquet or JSON Lines file, chosen by its suffix."""
    path = Path(path)
    reader = READERS.get(path.suffix.lower())
    if reader is None:
        raise UserError(f"{path} is not a {TABLE_FILES} file; save the table as one of them")
    if not path.is_file():
        raise UserError(f"{path} does not exist; pass the path of a {TABLE_FILES} file")
    try:
        names = header(path)
        require_distinct(names, path)
        require_commas(names, path)
        frame = reader(path)
    except pd.errors.EmptyDataError:
        frame = pd.DataFrame()
    except UnicodeDecodeError as error:
        raise not_utf8(path, error) from None
    except (ValueError, OSError, pd.errors.ParserError) as error:
        reason = str(error).strip().split("\n")[0]
        raise UserError(f"{path} is not a readable table: {reason}") from None
    if frame.empty:
        rows = "a header line and one row per sample"
        if path.suffix.lower() == ".jsonl":
            rows = "one JSON object per line, one per sample"
        raise UserError(f"{path} holds no rows; expected {rows}")
    return frame


def require_distinct(names: list[str], path: Path) -> None:
    repeated = [name for name in names if names.count(name) > 1]
    if repeated:
        raise UserError(
            f"{path} names column {repeated[0]!r} twice in its header; give each column a "
            "name of its own"
        )


def require_commas(names: list[str], path: Path) -> None:
    """A CSV header that commas split into one name, such as "a;b": nor do they split its rows."""
    if path.suffix.lower() != ".csv" or len(names) != 1:
        return
    for separator in (";", "\t", "|"):
        if separator in names[0]:
            raise UserError(
                f"{path} separates its columns with {separator!r}, not commas; save it as CSV "
                "with commas, or as .parquet"
            )


def header(path: Path) -> list[str]:
    """The column names as the file has them: pandas renames a repeated CSV name (a, a.1)."""
    if path.suffix.lower() == ".jsonl":
        return []  # each row names its own
    if path.suffix.lower() == ".csv":
        with path.open(newline="", encoding="utf-8-sig", errors="replace") as file:
            return next(csv.reader(file), [])
    import pyarrow.parquet  # pandas' Parquet reader, which refuses repeated names less clearly

    return pyarrow.parquet.read_metadata(path).schema.to_arrow_schema().names


def require_columns(frame: pd.DataFrame, columns: list[str], source: str) -> None:
    missing = [column for column in columns if column not in frame.columns]
    if not missing:
        return
    # Hydra reads data.target=2020 as a number, which names no column "2020".
    quote = f" (Hydra reads {missing[0]} as a number: quote it, '{missing[0]}')"
    raise UserError(
        f"{source} has no column {missing[0]!r}; its columns: {', '.join(map(str, frame))}"
        + (quote if not isinstance(missing[0], str) and str(missing[0]) in frame else "")
    )


# Fitting


def fit(frame: pd.DataFrame, columns: list[str], categorical: list[str]) -> Preprocessing:
    """Preprocessing from the training rows: numeric columns standardized (missing values: the
    training mean); dates and times as their parts, each standardized (missing: the training
    means); categorical ones one-hot over their training vocabulary plus one slot for values
    not seen in training (missing values: the most frequent training value)."""
    specs: list[Numeric | Categorical | Datetime] = []
    features: list[str] = []
    for name in columns:
        values = frame[name]
        spec: Numeric | Categorical | Datetime
        if name in categorical:
            spec = fit_categorical(values, name, columns)
        elif (form := date_format(values)) is not None:
            spec = fit_datetime(values, name, form)
        elif (numbers := numeric_column(values, name)) is not None:
            mean, std = standardization(numbers)
            spec = Numeric(name=name, mean=mean, std=std, fill=mean)
        else:
            spec = fit_categorical(values, name, columns)
        specs.append(spec)
        features += feature_names(spec)
    return Preprocessing(columns=specs, features=features)


def standardization(numbers: pd.Series) -> tuple[float, float]:
    """The mean and std of the present values; 0 and 1 where they say nothing."""
    mean, std = numbers.mean(), numbers.std(ddof=0)
    mean = 0.0 if math.isnan(mean) else float(mean)
    return mean, 1.0 if math.isnan(std) or std == 0 else float(std)


def fit_datetime(values: pd.Series, name: str, form: str) -> Datetime:
    times = datetimes(values, name, form, "the training rows")
    timed = bool((times.dropna() != times.dropna().dt.normalize()).any())
    parts = DATE_PARTS + (TIME_PARTS if timed else [])
    stats = [standardization(pd.Series(numbers)) for numbers in date_parts(times, parts).T]
    mean, std = (list(each) for each in zip(*stats, strict=True))
    return Datetime(name=name, format=form, parts=parts, mean=mean, std=std)


def date_parts(times: pd.Series, parts: list[Part]) -> np.ndarray:
    """The `parts` of each time as numbers, (N, len(parts)); NaN where a time is missing."""
    return np.stack([getattr(times.dt, part).to_numpy("float64") for part in parts], axis=1)


def fit_categorical(values: pd.Series, name: str, columns: list[str]) -> Categorical:
    """The column's training vocabulary, refused in one line if it names rows rather than
    sorting them into categories."""
    present = categories(values.dropna())
    counts = present.value_counts()
    if len(counts) > max(MAX_IDENTIFIER_VALUES, len(present) / 2):
        others = features_setting([column for column in columns if column != name])
        raise UserError(
            f"column {name!r} holds {len(counts)} distinct values in {len(present)} training "
            "rows: an identifier, not categories, which one-hot encoding would make a feature "
            f"per row; leave it out with {others}"
        )
    fill = str(counts.idxmax()) if len(present) else UNKNOWN
    return Categorical(name=name, vocabulary=sorted(counts.index), fill=fill)


def features_setting(names: list[str]) -> str:
    """data.features=[...] naming `names` as Hydra reads them, and a shell passes them on: a
    name that is more than letters, digits and _ . - in quotes, and then the whole in quotes."""
    quoted = [
        name if PLAIN_NAME.fullmatch(name) else "'" + name.replace("'", "\\'") + "'"
        for name in map(str, names)
    ]
    setting = f"data.features=[{','.join(quoted)}]"
    return setting if quoted == list(map(str, names)) else f'"{setting}"'


def feature_names(spec: Numeric | Categorical | Datetime) -> list[str]:
    if isinstance(spec, Categorical):
        return [f"{spec.name}={value}" for value in [*spec.vocabulary, UNKNOWN]]
    if isinstance(spec, Datetime):
        return [f"{spec.name}.{part}" for part in spec.parts]
    return [spec.name]


def require_plain(frame: pd.DataFrame, columns: list[str], source: str) -> None:
    """Refuses, in one line, a column that holds lists or structs (Parquet's nested columns),
    or an infinite number, which would make every loss NaN."""
    for name in columns:
        values = frame[name]
        value = nested(values)
        if value is not None:
            raise UserError(
                f"{source}: column {name!r} holds {type(value).__name__} values such as "
                f"{value!r}, not numbers, text or dates: flatten it into columns of their own, "
                "or leave it out of data.features"
            )
        infinite = np.isinf(values.to_numpy()) if values.dtype.kind == "f" else None
        if infinite is not None and infinite.any():
            row = values.index[infinite.argmax()]
            raise UserError(
                f"{source}: column {name!r} holds {values[row]} in row {row} (infinite in "
                f"{infinite.sum()} of {len(values)} rows), which would make the loss NaN: "
                "replace those by finite numbers, or leave them empty if missing"
            )


def fit_target(values: pd.Series, name: str, task: str | None, units: str | None, train):
    """What the target column asks of the model. `task` null: text and booleans are class
    labels, and so are integers with at most MAX_INTEGER_CLASSES distinct values (the class
    names are the values, sorted), unless they name rows; other numbers are a regression target,
    standardized with the mean and std of the `train` rows."""
    from ..targets import classification, regression

    kind = values.dtype.kind
    integers = kind in "iu" or (kind == "f" and bool((values % 1 == 0).all()))
    if task is None:
        classes = values.nunique()
        labels = kind in "bO" or (integers and classes <= MAX_INTEGER_CLASSES)
        if labels and classes > max(MAX_IDENTIFIER_VALUES, len(values) / 2):
            raise UserError(
                f"target column {name!r} holds {classes} classes in {len(values)} rows: an "
                "identifier, not classes to learn; pass data.target=<the column to predict>, "
                "or data.task=classification if they are classes all the same"
            )
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
    # For refusals: where the rows come from, and what the model takes.
    where, trained = f"{source}: ", "the model was trained on numbers there"
    fix = f"fix them: {trained}"
    start = 0
    for spec in preprocessing.columns:
        values = frame[spec.name]
        value = nested(values)
        if value is not None:
            raise UserError(
                f"{source}: column {spec.name!r} holds {type(value).__name__} values; the model "
                f"was trained on {spec.kind} values there"
            )
        if isinstance(spec, Datetime):
            times = datetimes(values, spec.name, spec.format, source)
            parts = date_parts(times, spec.parts)
            filled = np.where(np.isnan(parts), spec.mean, parts)
            encoded[:, start : start + len(spec.parts)] = (filled - spec.mean) / np.array(spec.std)
            start += len(spec.parts)
            continue
        if isinstance(spec, Numeric):
            numbers = numeric_column(values, spec.name, where, fix)
            if numbers is None:
                raise UserError(f"{where}column {spec.name!r} holds text; {trained}")
            filled = numbers.fillna(spec.fill).to_numpy()
            with np.errstate(over="ignore"):  # beyond float32: infinite, refused as such
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
    """A .csv, .parquet or .jsonl table of rows."""
    if path.suffix.lower() not in TABLE_SUFFIXES:
        raise UserError(
            f"input={str(path)!r}: the model takes table rows; pass a {TABLE_FILES} file "
            "(or a .npy array of raw numbers)"
        )
    inputs = from_rows(read_table(path), preprocessing, str(path))
    return inputs, [{"file": str(path), "index": index} for index in range(len(inputs))]


def json_forms(preprocessing: Preprocessing) -> dict:
    """Rows of every column (null where a value is missing; a categorical value may be a
    number, a numeric one a boolean, as a CSV's True reads; and columns the model does not use
    may come too), or raw numbers in column order."""
    value = Number | StrictStr | None
    # Field names of their own: a column's name may be anything, "_private" or "model_config".
    columns: dict = {
        f"column_{index}": (
            Number | StrictBool | None if isinstance(column, Numeric) else value,
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
        return from_arrays(number_array(payload["inputs"], "inputs"), preprocessing, "inputs")
    rows = payload.get("rows")
    if rows == []:
        raise UserError("rows holds no rows; send at least one")
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
        if isinstance(column, Datetime):  # the page asks for a date, or a date and a time
            field["time"] = "hour" in column.parts
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
        if isinstance(column, Categorical):
            continue
        for std in column.std if isinstance(column, Datetime) else [column.std]:
            if not (math.isfinite(std) and std > 0):
                raise UserError(
                    f"{where} has preprocessing column {column.name!r} std {std}; it must be "
                    "positive"
                )


def files(preprocessing: Preprocessing) -> dict[str, str]:
    return {}
