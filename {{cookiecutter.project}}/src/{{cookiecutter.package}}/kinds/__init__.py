"""Input kinds as plug-ins: one module per kind (image.py, table.py, text.py), found by the
contract's `input.kind`, the module's name. Only these modules know what a kind's samples look
like; datamodules, inference, serving, the page and export ask them through `get(kind)`.

A kind module defines, with numpy, Pillow, pandas or tokenizers and never torch:

- `Preprocessing`, a `contract.Preprocessing` model: its part of the data contract, fitted on
  the training split by its `fit(...)` (its datamodules call it; what it is fitted on differs
  per kind) and applied by its `encode(...)`, in training and in prediction alike;
- `input_shape(preprocessing) -> list[int]`: one encoded sample's shape, and `DTYPE`, its
  numpy dtype (float32 values, or int64 token ids); optionally `DYNAMIC_AXES`, the axes of a
  sample whose size the exported models leave open, up to that of `input_shape`, by name (a
  text's `{0: "tokens"}`);
- `read_inputs(path, preprocessing) -> (inputs, sources)`: predict's inputs from a file or
  folder, with where each sample came from (`{"file": ..., "index": ...}`);
- `from_arrays(array, preprocessing, source) -> inputs`: raw values as the dataset stores them
  (a .npy file, a request's `inputs`);
- `from_json(payload, preprocessing) -> inputs`: a request's JSON body (`inputs` or `rows`);
  optionally `prepare(raw, preprocessing, source) -> inputs`, which does for a whole batch at
  once what is left to do after `from_json`, whose result is then raw values that `prepare` takes
  (the server prepares the requests it batches together in one call, and each request alone only
  to tell which one `prepare` refused);
- `json_forms(preprocessing) -> dict`: the keys a request's JSON body may give its samples
  under (one per request), each with the type of its value, for the server's Pydantic models
  and OpenAPI document (`arrays(...)` below builds arrays of numbers): exactly what
  `from_json` takes, which checks those shapes itself (the server reads a body of numbers alone
  with `from_json` only; `number_array(...)` below reads a request's nested arrays);
- `REQUEST`: what a request sends, for one-line refusals;
- `UPLOAD`: what the page's file chooser accepts (e.g. "image/*"), or None; if not None,
  `UPLOAD_TYPES`, the media types it stands for, and
  `from_upload(data, name, preprocessing) -> inputs` for an uploaded file's bytes (a
  `console.TooLarge` for one too large to decode);
- `form(preprocessing) -> dict`: what the page asks for (`{"type": "file" | "fields", ...}`);
- `check(preprocessing, shape, where)`: refuses, in one line, a manifest's preprocessing that
  cannot feed a model of input `shape`;
- `files(preprocessing) -> dict[str, str]`: files that export writes beside the models for
  other runtimes, by name (a text model's tokenizer.json), or none.

Inputs are arrays of (N, *input_shape) of DTYPE; a bad one is a UserError with one line. A
kind that lacks one of REQUIRED is refused in one line when a command first asks for it.
"""

import sys
from types import ModuleType
from typing import Annotated, Any, Union, get_args

import numpy as np
from pydantic import Discriminator, Field, Tag

from .. import plugins
from ..console import UserError

# What every kind defines; the rest above is optional.
REQUIRED = (
    "Preprocessing",
    "input_shape",
    "DTYPE",
    "read_inputs",
    "from_arrays",
    "from_json",
    "json_forms",
    "REQUEST",
    "UPLOAD",
    "form",
    "check",
    "files",
)
# The largest float32: the model's inputs are float32, larger values are refused as infinite.
FLOAT32_MAX = 3.4028234663852886e38
# What marks the types of `arrays` of numbers: the server reads a body that holds only numbers
# under such a key with the kind's from_json alone, which checks what Pydantic would.
NUMBER_ARRAYS = "arrays of numbers"
# The files of rows that tables, and tables of texts, are read from (table.read_table).
TABLE_SUFFIXES = (".csv", ".parquet", ".pq", ".jsonl")


def number(low: float = -FLOAT32_MAX, high: float = FLOAT32_MAX) -> Any:
    """A JSON number (booleans, text and null are not) that the schema says lies in low..high;
    the kind refuses one beyond them, in a line of its own."""
    return Annotated[
        float, Field(strict=True, json_schema_extra={"minimum": low, "maximum": high})
    ]


Number = number()


def get(kind: str) -> ModuleType:
    return plugins.find(sys.modules[__name__], kind, "input kind")


def dynamic_axes(kind: str) -> dict[int, str]:
    return getattr(get(kind), "DYNAMIC_AXES", {})


def model_shape(kind: str, shape: list[int]) -> list[int | str]:
    """A sample's shape as the exported models take it: each dynamic axis by its name."""
    axes = dynamic_axes(kind)
    return [axes.get(axis, size) for axis, size in enumerate(shape)]


def arrays(*shapes: tuple[int | None, ...], values: Any = Number) -> Any:
    """The type of nested JSON arrays of `values` of any of `shapes`, None for the sample axis
    (one sample or more). A value is checked against the shapes of its own depth only: a union
    tries its members in turn, and one that fails costs a request more than one that passes."""

    def nested(shape: tuple[int | None, ...]) -> Any:
        if not shape:
            return values
        size, *inner = shape
        length = Field(min_length=1) if size is None else Field(min_length=size, max_length=size)
        return Annotated[list[nested(tuple(inner))], length]  # type: ignore[misc]

    by_depth: dict[int, list] = {}
    for shape in shapes:
        by_depth.setdefault(len(shape), []).append(nested(shape))
    tagged = [Annotated[Union[tuple(same)], Tag(str(n))] for n, same in by_depth.items()]  # noqa: UP007
    union: Any = Union[tuple(tagged)]  # noqa: UP007  (a built union)
    if (get_args(values) or [values])[0] is float:
        return Annotated[union, Discriminator(depth), NUMBER_ARRAYS]
    return Annotated[union, Discriminator(depth)]


def number_arrays(form: Any) -> bool:
    """Whether a json_forms type is `arrays` of numbers."""
    return NUMBER_ARRAYS in getattr(form, "__metadata__", ())


def number_array(values: Any, source: str) -> np.ndarray:
    """A request's nested JSON arrays as one array, refused in one line where rows differ in
    length or the arrays nest deeper than numpy's dimensions."""
    try:
        return np.asarray(values)
    except ValueError:
        deep = int(depth(values))
        if deep > 32:  # numpy's limit is 64; no input nests half as deep
            raise UserError(
                f"{source} nests arrays {deep} deep: send samples of the model's input shape "
                "(GET /info)"
            ) from None
        raise UserError(f"{source} must be an array of numbers, every row as long") from None


def depth(value: Any) -> str:
    """How deep a JSON value nests arrays, counted down their first items: the tag of the
    shapes that `arrays` checks it against."""
    count = 0
    while isinstance(value, list) and value:
        value, count = value[0], count + 1
    return str(count)
