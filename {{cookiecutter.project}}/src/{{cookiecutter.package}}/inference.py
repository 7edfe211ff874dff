"""Predictions from an exported model with numpy, onnxruntime, Pillow and pandas only: predict
and serve use it. The manifest holds the data contract of training; its preprocessing is applied
by preprocess.py, the same code the datamodules prepare training data with.

Nothing here may import torch or Lightning, directly or through other modules of this package,
so that it runs in a slim serving environment.
"""

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pandas as pd
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidProtobuf

from .console import UserError
from .files import sha256
from .onnx_session import VARIANTS, open_session, run
from .preprocess import IMAGE_SUFFIXES, decode_image, encode_table, normalize, read_table

TABLE_SUFFIXES = (".csv", ".parquet", ".pq")
CHUNK = 256  # samples per onnxruntime call, which bounds memory on large inputs
# What predict reads from manifest.json, and the type each must have.
MANIFEST_FIELDS = {
    "formats": dict,
    "task": str,
    "input": dict,
    "preprocessing": dict,
    "target": dict,
}


def load_export(
    path: Path, threads: int = 0, variant: str = "fp32"
) -> tuple[ort.InferenceSession, dict]:
    """The session of one ONNX variant of an export (fp32: model.onnx, int8: model.int8.onnx,
    optimized: model.optimized.onnx), and the manifest.json export.py wrote beside it, checked
    against each other before anything is predicted. `path` is the export's folder, or the
    variant's file in it."""
    model = path / "model.onnx" if path.is_dir() else path
    if not model.is_file():
        raise UserError(
            f"model={str(path)!r} is neither an .onnx file nor a folder with model.onnx; "
            "pass model=<export dir>"
        )
    manifest_path = model.parent / "manifest.json"
    if not manifest_path.is_file():
        raise UserError(f"no manifest.json next to {model}; pass the folder of an export.py run")
    manifest = read_manifest(manifest_path)
    entry = variant_entry(manifest, variant, model.parent)
    if path.is_dir():
        model = path / entry["file"]
        if not model.is_file():
            raise UserError(
                f"{path} lacks {entry['file']}, which its manifest lists; export again"
            )
    try:
        session = open_session(model, threads)
    except (InvalidProtobuf, Fail):
        message = f"{model} is not an ONNX model; expected the model.onnx that export.py writes"
        raise UserError(message) from None
    if model.name != entry["file"]:
        raise UserError(
            f"{model} is not the variant={variant} model of its export, {entry['file']} is: pass "
            "model=<export dir> with the variant to run (fp32, int8 or optimized)"
        )
    # The preprocessing and class names below are only right for the model they came with.
    if sha256(model) != entry.get("sha256"):
        raise UserError(f"{model} is not the model that {manifest_path} describes; export again")
    check_manifest(manifest, session, manifest_path)
    return session, manifest


def variant_entry(manifest: dict, variant: str, folder: Path) -> dict:
    """The manifest's entry of the ONNX file that `variant` names; one line naming the variants
    the export holds when it holds no such file."""
    held = [name for name, format in VARIANTS.items() if format in manifest["formats"]]
    if variant not in held:
        raise UserError(
            f"variant={variant} is not an ONNX model of the export in {folder}; it holds "
            f"{', '.join(held) or 'none'}"
        )
    return manifest["formats"][VARIANTS[variant]]


def read_manifest(path: Path) -> dict:
    try:
        manifest = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserError(f"{path} is not valid JSON ({error}); export again") from None
    wrong = [
        name
        for name, kind in MANIFEST_FIELDS.items()
        if not isinstance(manifest, dict) or not isinstance(manifest.get(name), kind)
    ]
    if wrong:
        raise UserError(f"{path} lacks {', '.join(wrong)} (or has the wrong type); export again")
    return manifest


def outputs(manifest: dict) -> int:
    """How many numbers the model gives per sample: a logit per class, or one value."""
    target = manifest["target"]
    return len(target.get("class_names", [])) if manifest["task"] == "classification" else 1


def check_manifest(manifest: dict, session: ort.InferenceSession, path: Path) -> None:
    """The manifest must describe the model it sits beside: its input, its outputs, a usable
    preprocessing."""
    expected = session.get_inputs()[0].shape[1:]
    declared = manifest["input"].get("shape", [None])[1:]
    if declared != expected:
        raise UserError(f"{path} declares inputs of shape {declared}, the model takes {expected}")
    given = session.get_outputs()[0].shape[-1]
    if given != outputs(manifest):
        what = (
            f"names {outputs(manifest)} classes"
            if manifest["task"] == "classification"
            else ("describes a regression (one output)")
        )
        raise UserError(f"{path} {what}, the model has {given} outputs")
    if manifest["input"].get("kind") == "image":
        check_image_preprocessing(manifest["preprocessing"], expected, path)
    else:
        check_table_preprocessing(manifest["preprocessing"], path)


def lacking(spec: dict, fields: dict, path: Path, where: str) -> None:
    """One line naming the fields of `spec` that are missing or of another type than `fields`
    says."""
    wrong = [name for name, kind in fields.items() if not isinstance(spec.get(name), kind)]
    if wrong:
        names = ", ".join(f"{where}.{name}" for name in wrong)
        raise UserError(f"{path} lacks {names} (or has the wrong type); export again")


def check_positive(std, path: Path, where: str) -> None:
    values = np.asarray(std, dtype=np.float64)
    if not (np.isfinite(values).all() and (values > 0).all()):
        raise UserError(f"{path} has {where} {values.tolist()}; it must be positive")


def check_image_preprocessing(spec: dict, shape: list, path: Path) -> None:
    fields = {"channels": int, "image_size": int, "value_range": list, "mean": list, "std": list}
    lacking(spec, fields, path, "preprocessing")
    prepared = [spec["channels"], spec["image_size"], spec["image_size"]]
    if prepared != shape:
        raise UserError(f"{path} prepares images of shape {prepared}, the model takes {shape}")
    if not len(spec["mean"]) == len(spec["std"]) == spec["channels"]:
        raise UserError(f"{path} needs one mean and one std per channel ({spec['channels']})")
    check_positive(spec["std"], path, "normalization std")


def check_table_preprocessing(spec: dict, path: Path) -> None:
    lacking(spec, {"columns": list, "features": list}, path, "preprocessing")
    for column in spec["columns"]:
        if not isinstance(column, dict) or column.get("kind") not in ("numeric", "categorical"):
            raise UserError(
                f"{path} has a column spec that is not numeric or categorical: {column}"
            )
        where = f"preprocessing column {column.get('name')!r}"
        if column["kind"] == "numeric":
            number = (int, float)
            fields = {"name": str, "mean": number, "std": number, "fill": number}
            lacking(column, fields, path, where)
            check_positive(column["std"], path, f"{where} std")
        else:
            lacking(column, {"name": str, "vocabulary": list}, path, where)


def from_arrays(array: np.ndarray, manifest: dict, source: str) -> np.ndarray:
    """Model inputs from raw values, as the dataset stores them: images of the manifest's shape
    (one sample, or no single channel axis, is fine), or table rows of its numeric columns."""
    if array.dtype.kind not in "fiu":
        raise UserError(f"{source} holds {array.dtype} values; expected raw values as numbers")
    if manifest["input"]["kind"] == "table":
        columns = manifest["input"]["columns"]
        rows = array[None] if array.ndim == 1 else array
        if rows.ndim != 2 or rows.shape[1] != len(columns):
            raise UserError(
                f"{source} has shape {array.shape}; expected (N, {len(columns)}): the columns "
                f"{', '.join(columns)}"
            )
        return from_rows(pd.DataFrame(rows, columns=columns), manifest, source)
    batch = as_batch(array, tuple(manifest["input"]["shape"][1:]), source)
    return normalize(batch, manifest["preprocessing"]).astype(np.float32)


def as_batch(array: np.ndarray, shape: tuple, source: str) -> np.ndarray:
    """A float32 batch of samples of `shape`; one sample, or no single channel axis, is fine."""
    one_channel = len(shape) == 3 and shape[0] == 1
    if array.shape[1:] == shape:
        batch = array
    elif array.shape == shape:
        batch = array[None]
    elif one_channel and array.shape[1:] == shape[1:]:
        batch = array[:, None]
    elif one_channel and array.shape == shape[1:]:
        batch = array[None, None]
    else:
        dims = ", ".join(map(str, shape))
        raise UserError(f"{source} has shape {array.shape}; expected (N, {dims}) or ({dims})")
    if not len(batch):
        raise UserError(f"{source} holds no samples")
    return batch.astype(np.float32)


def from_rows(frame: pd.DataFrame, manifest: dict, source: str) -> np.ndarray:
    """Model inputs from table rows: columns matched by name, extra ones ignored."""
    if manifest["input"]["kind"] != "table":
        raise UserError(f"{source} holds table rows, but the model takes images")
    if frame.empty:
        raise UserError(f"{source} holds no rows")
    return encode_table(frame, manifest["preprocessing"], source)


def from_images(images: Sequence[Path | bytes], manifest: dict) -> np.ndarray:
    """Model inputs from image files (or their bytes), decoded and resized as in training."""
    if manifest["input"]["kind"] != "image":
        raise UserError("the model takes table rows, not images: pass a .csv or .parquet file")
    return np.stack([decode_image(image, manifest["preprocessing"]) for image in images])


def image_files(path: Path) -> list[Path]:
    """An image file, or the image files in a folder and its subfolders (hidden ones left out)."""
    if path.is_file():
        return [path] if path.suffix.lower() in IMAGE_SUFFIXES else []
    return sorted(
        file
        for file in path.rglob("*")
        if file.suffix.lower() in IMAGE_SUFFIXES
        and not any(part.startswith(".") for part in file.relative_to(path).parts)
    )


def read_inputs(path: Path, manifest: dict) -> tuple[np.ndarray, list[dict]]:
    """Model inputs from a .npy array, a .csv or .parquet table, an image file or a folder of
    images, and where each sample came from."""
    if not path.exists():
        raise UserError(
            f"input={str(path)!r} does not exist; pass input=<.npy, .csv, .parquet, image or "
            "folder>"
        )
    suffix = path.suffix.lower()
    if suffix in (".npy", *TABLE_SUFFIXES):
        if suffix == ".npy":
            try:
                array = np.load(path, allow_pickle=False)
            except ValueError as error:
                raise UserError(f"{path} is not a numeric .npy array: {error}") from None
            inputs = from_arrays(array, manifest, str(path))
        else:
            inputs = from_rows(read_table(path), manifest, str(path))
        return inputs, [{"file": str(path), "index": index} for index in range(len(inputs))]
    images = image_files(path)
    if not images:
        raise UserError(
            f"input={str(path)!r} is not a .npy, .csv or .parquet file, an image or a folder of "
            f"images ({', '.join(IMAGE_SUFFIXES)})"
        )
    return from_images(images, manifest), [{"file": str(image), "index": None} for image in images]


def non_finite(inputs: np.ndarray) -> np.ndarray:
    """For each sample: does it hold a NaN or an infinity?"""
    return ~np.isfinite(inputs.reshape(len(inputs), -1)).all(axis=1)


def check_top_k(top_k) -> int:
    """How many of the most probable classes to list: a whole number of at least 1."""
    if type(top_k) is not int or top_k < 1:
        raise UserError(f"top_k={top_k} must be a whole number of at least 1")
    return top_k


def predictions(
    session: ort.InferenceSession, manifest: dict, inputs: np.ndarray, top_k: int = 1
) -> list[dict]:
    """For each (finite) prepared sample: its class and probability, with the `top_k` most
    probable classes when top_k > 1; or, for regression, its value in the target's units."""
    if not len(inputs):
        return []
    chunks = [inputs[start : start + CHUNK] for start in range(0, len(inputs), CHUNK)]
    outputs = np.concatenate([run(session, chunk) for chunk in chunks])
    target = manifest["target"]
    if manifest["task"] == "regression":
        values = outputs[:, 0] * target["std"] + target["mean"]
        return [{"value": round(float(value), 6)} for value in values]
    exp = np.exp(outputs - outputs.max(axis=1, keepdims=True))
    scores = exp / exp.sum(axis=1, keepdims=True)
    names = target["class_names"]
    results = []
    for row in scores:
        ranked = [
            {"class": names[index], "probability": round(float(row[index]), 6)}
            for index in np.argsort(-row, kind="stable")[:top_k]
        ]
        results.append(ranked[0] | ({"top": ranked} if top_k > 1 else {}))
    return results
