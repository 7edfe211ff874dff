"""The data contract's preprocessing, written once: the datamodules prepare training and
evaluation data with these functions, and predict and serve prepare their inputs with them.

A contract is a plain JSON-able dict that a datamodule declares after `setup()`:
`{"input": {...}, "preprocessing": {...}, "target": {...}}` (see README.md). Only numpy, Pillow
and pandas here, directly or through other modules: this runs where torch is not installed.
"""

import math
from collections.abc import Callable
from io import BytesIO
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image, ImageOps, UnidentifiedImageError

from .console import UserError

# Suffixes of the image files that the images datamodule reads and predict accepts.
IMAGE_SUFFIXES = (".bmp", ".gif", ".jpeg", ".jpg", ".png", ".tif", ".tiff", ".webp")
# One filter everywhere: training, evaluation and prediction must resize alike. Pillow's
# bilinear filter widens with the scale factor, so downscaling averages instead of aliasing.
RESAMPLING = Image.Resampling.BILINEAR
ORIENTATION = 0x0112  # the EXIF tag
TABLE_READERS: dict[str, Callable[[Path], pd.DataFrame]] = {
    ".csv": pd.read_csv,
    ".parquet": pd.read_parquet,
    ".pq": pd.read_parquet,
}
# An integer target with at most this many distinct values is a class label.
MAX_INTEGER_CLASSES = 20
UNKNOWN = "<unknown>"


def classification_target(class_names: list[str], name: str | None = None) -> dict:
    return {"task": "classification", "class_names": list(class_names)} | (
        {"name": name} if name else {}
    )


# Images


def image_contract(
    channels: int,
    image_size: int,
    value_range: list[float],
    normalization: dict,
    target: dict,
) -> dict:
    """`normalization`: {"mean": [...], "std": [...]}, one value per channel."""
    return {
        "input": {
            "kind": "image",
            "shape": [channels, image_size, image_size],
            "dtype": "float32",
        },
        "preprocessing": {
            "channels": channels,
            "image_size": image_size,
            "value_range": list(value_range),
            **normalization,
        },
        "target": target,
    }


def open_image(source: str | Path | bytes, channels: int) -> Image.Image:
    """An image file (or its bytes), decoded and converted to greyscale or RGB."""
    name = "the image" if isinstance(source, bytes) else str(source)
    try:
        with Image.open(BytesIO(source) if isinstance(source, bytes) else source) as file:
            # A photo as the camera was held. EXIF is parsed only where a file has it (TIFF
            # holds it among its own tags): parsing costs every file of a folder.
            has_exif = "exif" in file.info or file.format == "TIFF"
            turned = has_exif and file.getexif().get(ORIENTATION, 1) != 1
            image = ImageOps.exif_transpose(file) if turned else file
            return eight_bits(image, name).convert("L" if channels == 1 else "RGB")
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as error:
        reason = str(error).split("\n")[0] or type(error).__name__
        raise UserError(f"{name} is not a readable image ({reason}); fix or remove it") from None


def eight_bits(image: Image.Image, name: str) -> Image.Image:
    """16-bit and floating-point greyscale images scaled to 0..255: Pillow's convert() clips
    them instead, so that a 16-bit image would read as white and one of floats as black."""
    if image.mode not in ("I", "F") and not image.mode.startswith("I;16"):
        return image
    values = np.asarray(image, dtype=np.float64)
    if image.mode == "F":
        if values.size and not (values.min() >= 0 and values.max() <= 1):
            raise UserError(
                f"{name} holds floating-point values outside 0..1; save it with 8 or 16 bits "
                "per channel"
            )
        values = values * 255
    elif image.mode != "I" or values.max(initial=0) > 255:  # "I" holds 8-bit values too
        values = values / 257
    return Image.fromarray(np.round(values).clip(0, 255).astype(np.uint8))


def image_values(image: Image.Image, preprocessing: dict, box=None) -> np.ndarray:
    """Raw values (channels, size, size) as float32 in `value_range`: the image, or the part of
    it inside `box` (left, top, right, bottom), resized; files hold 0..255."""
    size = preprocessing["image_size"]
    resized = image.resize((size, size), RESAMPLING, box=box)
    pixels = np.asarray(resized).reshape(size, size, -1).transpose(2, 0, 1)
    low, high = preprocessing["value_range"]
    raw = np.ascontiguousarray(pixels, dtype=np.float32)
    raw *= np.float32((high - low) / 255)
    raw += np.float32(low)
    return raw


def normalize(raw: np.ndarray, preprocessing: dict) -> np.ndarray:
    """(x - mean) / std per channel, for one image (C, H, W) or a batch (N, C, H, W)."""
    mean, std = (np.float32(preprocessing[key]).reshape(-1, 1, 1) for key in ("mean", "std"))
    return (raw - mean) / std


def decode_image(source: str | Path | bytes, preprocessing: dict) -> np.ndarray:
    """An image file (or its bytes) as the model's input, exactly as evaluation prepares it."""
    image = open_image(source, preprocessing["channels"])
    return normalize(image_values(image, preprocessing), preprocessing)


def pixel_moments(raw: np.ndarray) -> np.ndarray:
    """Per channel: how many values, their sum and their sum of squares (float64), of one image
    (C, H, W) or a batch (N, C, H, W). The moments of several images add up."""
    values = np.moveaxis(raw, -3, 0).reshape(raw.shape[-3], -1).astype(np.float64)
    squares = np.einsum("ij,ij->i", values, values)
    return np.stack([np.full(len(values), values.shape[1]), values.sum(1), squares], 1)


def normalization(moments: np.ndarray) -> dict:
    """Per-channel mean and standard deviation from summed `pixel_moments`."""
    count, total, squares = moments.T
    mean = total / count
    std = np.sqrt(np.maximum(squares / count - mean**2, 0))
    std[std == 0] = 1  # a constant channel: nothing to scale
    return {"mean": mean.tolist(), "std": std.tolist()}


# Tables


def read_table(path: str | Path) -> pd.DataFrame:
    """A CSV or Parquet file, chosen by its suffix."""
    path = Path(path)
    reader = TABLE_READERS.get(path.suffix.lower())
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


def category(value) -> str:
    """A categorical value as text: 3, 3.0 and "3" are the same category."""
    if isinstance(value, float | np.floating) and float(value).is_integer():
        return str(int(value))
    return str(value)


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


def fit_table(frame: pd.DataFrame, columns: list[str], categorical: list[str]) -> dict:
    """Preprocessing from the training rows: numeric columns standardized (missing values: the
    training mean), categorical ones one-hot over their training vocabulary plus one slot for
    values not seen in training (missing values: the most frequent training value)."""
    specs, features = [], []
    for name in columns:
        values = frame[name]
        numbers = None if name in categorical else numeric_column(values, name)
        if numbers is not None:
            mean, std = numbers.mean(), numbers.std(ddof=0)
            mean = 0.0 if math.isnan(mean) else float(mean)
            std = 1.0 if math.isnan(std) or std == 0 else float(std)
            specs.append({"name": name, "kind": "numeric", "mean": mean, "std": std, "fill": mean})
            features.append(name)
            continue
        present = values.dropna().map(category)
        vocabulary = sorted(present.unique())
        fill = present.value_counts().idxmax() if len(present) else UNKNOWN
        specs.append({"name": name, "kind": "categorical", "vocabulary": vocabulary, "fill": fill})
        features += [f"{name}={value}" for value in [*vocabulary, UNKNOWN]]
    return {
        "columns": specs,
        "fill": {"numeric": "training mean", "categorical": "most frequent training value"},
        "unknown": UNKNOWN,
        "features": features,
    }


def table_contract(preprocessing: dict, target: dict) -> dict:
    columns = [spec["name"] for spec in preprocessing["columns"]]
    return {
        "input": {
            "kind": "table",
            "shape": [len(preprocessing["features"])],
            "dtype": "float32",
            "columns": columns,
        },
        "preprocessing": preprocessing,
        "target": target,
    }


def encode_table(
    frame: pd.DataFrame, preprocessing: dict, source: str = "the table"
) -> np.ndarray:
    """Rows as the model's float32 input (N, F). Columns are matched by name, in any order;
    columns the model does not use are ignored."""
    specs = preprocessing["columns"]
    require_columns(frame, [spec["name"] for spec in specs], source)
    encoded = []
    for spec in specs:
        values = frame[spec["name"]]
        if spec["kind"] == "numeric":
            numbers = numeric_column(values, spec["name"])
            if numbers is None:
                raise UserError(
                    f"{source}: column {spec['name']!r} holds text; the model was trained on "
                    "numbers there"
                )
            filled = numbers.fillna(spec["fill"]).to_numpy()
            encoded.append(((filled - spec["mean"]) / spec["std"])[:, None])
            continue
        slots = indices(values.map(category, na_action="ignore").fillna(spec["fill"]), spec)
        encoded.append(np.eye(len(spec["vocabulary"]) + 1)[slots])
    return np.concatenate(encoded, axis=1).astype(np.float32)


def indices(labels: pd.Series, spec: dict) -> np.ndarray:
    """Each label's position in the vocabulary; labels outside it get the slot after the last."""
    positions = {value: index for index, value in enumerate(spec["vocabulary"])}
    return labels.map(positions).fillna(len(positions)).to_numpy(np.int64)


def fit_target(
    values: pd.Series,
    name: str,
    task: str | None = None,
    units: str | None = None,
    train: np.ndarray | None = None,
) -> dict:
    """What the target column asks of the model. `task` null: text and booleans are class
    labels, and so are integers with at most MAX_INTEGER_CLASSES distinct values (the class
    names are the values, sorted); other numbers are a regression target, standardized with the
    mean and std of the `train` rows."""
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
        return regression_target(values, name, units, train)
    if kind in "bO":
        classes = sorted(values.map(category).unique())
    else:  # numbers sort as numbers: 2 before 10
        classes = [category(value) for value in sorted(values.unique())]
    if len(classes) < 2:
        raise UserError(
            f"target column {name!r} holds one class ({classes[0]}); a classifier needs two"
        )
    return classification_target(classes, name)


def regression_target(values: pd.Series, name: str, units: str | None, train) -> dict:
    numbers = None if values.dtype.kind == "b" else numeric_column(values, name)
    if numbers is None:
        raise UserError(
            f"target column {name!r} holds text: a regression target must be numbers "
            "(data.task=classification reads it as class labels)"
        )
    fitted = numbers if train is None else numbers.iloc[train]
    mean, std = float(fitted.mean()), float(fitted.std(ddof=0))
    if not std > 0:
        raise UserError(
            f"target column {name!r} is {mean} in every training row: nothing to learn"
        )
    return {"task": "regression", "name": name, "mean": mean, "std": std, "units": units}


def encode_target(values: pd.Series, target: dict) -> np.ndarray:
    """Class indices (int64) of a target column, or its values standardized (float32)."""
    if target["task"] == "regression":
        numbers = numeric_column(values, target["name"])
        if numbers is None:
            raise UserError(
                f"target column {target['name']!r} holds text; the model was trained on numbers "
                "there"
            )
        return ((numbers.to_numpy() - target["mean"]) / target["std"]).astype(np.float32)
    return indices(values.map(category), {"vocabulary": target["class_names"]})
