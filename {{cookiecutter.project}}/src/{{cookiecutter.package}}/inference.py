"""Predictions from an exported model with numpy and onnxruntime only: predict and serve use it.

Image files need Pillow. Nothing here may import torch or Lightning, directly or through
other modules of this package, so that it runs in a slim serving environment.
"""

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidProtobuf

from .console import UserError
from .files import sha256
from .onnx_session import open_session, run

IMAGE_SUFFIXES = (".bmp", ".gif", ".jpeg", ".jpg", ".png", ".tif", ".tiff", ".webp")
CHUNK = 256  # samples per onnxruntime call, which bounds memory on large inputs


# What predict reads from manifest.json, and the type each must have.
MANIFEST_FIELDS = {"formats": dict, "input": dict, "normalization": dict, "class_names": list}


def load_export(path: Path) -> tuple[ort.InferenceSession, dict]:
    """The session of an export's model.onnx, and the manifest.json export.py wrote beside it,
    checked against each other before anything is predicted."""
    model = path / "model.onnx" if path.is_dir() else path
    if not model.is_file():
        raise UserError(
            f"model={str(path)!r} is neither an .onnx file nor a folder with model.onnx; "
            "pass model=<export dir>"
        )
    manifest_path = model.parent / "manifest.json"
    if not manifest_path.is_file():
        raise UserError(f"no manifest.json next to {model}; pass the folder of an export.py run")
    try:
        session = open_session(model)
    except (InvalidProtobuf, Fail):
        message = f"{model} is not an ONNX model; expected the model.onnx that export.py writes"
        raise UserError(message) from None
    manifest = read_manifest(manifest_path)
    # The normalization and class names below are only right for the model they were written with.
    if sha256(model) != manifest["formats"].get("onnx", {}).get("sha256"):
        raise UserError(f"{model} is not the model that {manifest_path} describes; export again")
    check_manifest(manifest, session, manifest_path)
    return session, manifest


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


def check_manifest(manifest: dict, session: ort.InferenceSession, path: Path) -> None:
    """The manifest must describe the model it sits beside: its input, its outputs, a usable
    normalization."""
    expected = session.get_inputs()[0].shape[1:]
    declared = manifest["input"].get("shape", [None])[1:]
    if declared != expected:
        raise UserError(f"{path} declares inputs of shape {declared}, the model takes {expected}")
    outputs = session.get_outputs()[0].shape[-1]
    if outputs != len(manifest["class_names"]):
        raise UserError(
            f"{path} names {len(manifest['class_names'])} classes, the model has {outputs} outputs"
        )
    std = np.asarray(manifest["normalization"].get("std", 0), dtype=np.float64)
    if not (np.isfinite(std).all() and (std > 0).all()):
        raise UserError(f"{path} has normalization std {std.tolist()}; it must be positive")


def as_batch(array: np.ndarray, shape: tuple, source: str) -> np.ndarray:
    """A float32 batch of samples of `shape`; one sample, or no single channel axis, is fine."""
    if array.dtype.kind not in "fiu":
        raise UserError(f"{source} holds {array.dtype} values; expected raw values as numbers")
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


def read_image(path: Path, shape: tuple, value_range: list[float]) -> np.ndarray:
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError:
        raise UserError(
            "image files need Pillow: pip install pillow, or pass a .npy array"
        ) from None
    channels, height, width = shape
    try:
        with Image.open(path) as image:
            image = image.convert("L" if channels == 1 else "RGB").resize((width, height))
            pixels = np.asarray(image, dtype=np.float32).reshape(height, width, channels)
    except (UnidentifiedImageError, OSError):
        raise UserError(f"{path} is not a readable image") from None
    low, high = value_range  # files hold 0..255; the model saw values in value_range
    return low + pixels.transpose(2, 0, 1) / 255 * (high - low)


def read_inputs(path: Path, spec: dict) -> tuple[np.ndarray, list[dict]]:
    """Raw samples from a .npy array, an image file or a folder of images, and their sources."""
    shape = tuple(spec["shape"][1:])
    if not path.exists():
        raise UserError(f"input={str(path)!r} does not exist; pass input=<.npy, image or folder>")
    if path.suffix == ".npy":
        try:
            array = np.load(path, allow_pickle=False)
        except ValueError as error:
            raise UserError(f"{path} is not a numeric .npy array: {error}") from None
        batch = as_batch(array, shape, str(path))
        return batch, [{"file": str(path), "index": index} for index in range(len(batch))]
    files = sorted(path.iterdir()) if path.is_dir() else [path]
    images = [file for file in files if file.suffix.lower() in IMAGE_SUFFIXES]
    if not images:
        raise UserError(
            f"input={str(path)!r} is not a .npy file, an image or a folder of images "
            f"({', '.join(IMAGE_SUFFIXES)})"
        )
    batch = np.stack([read_image(image, shape, spec["value_range"]) for image in images])
    return batch, [{"file": str(image), "index": None} for image in images]


def probabilities(session: ort.InferenceSession, inputs: np.ndarray) -> np.ndarray:
    chunks = [inputs[start : start + CHUNK] for start in range(0, len(inputs), CHUNK)]
    logits = np.concatenate([run(session, chunk) for chunk in chunks])
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    return exp / exp.sum(axis=1, keepdims=True)


def non_finite(raw: np.ndarray) -> np.ndarray:
    """For each sample: does it hold a NaN or an infinity?"""
    return ~np.isfinite(raw.reshape(len(raw), -1)).all(axis=1)


def classify(session: ort.InferenceSession, manifest: dict, raw: np.ndarray) -> list[dict]:
    """The class and its probability for each (finite) raw sample, normalized as in training."""
    if not len(raw):
        return []
    # Per-channel statistics broadcast over height and width; a single value over everything.
    norm = manifest["normalization"]
    mean, std = (np.asarray(norm[key], np.float32).reshape(-1, 1, 1) for key in ("mean", "std"))
    scores = probabilities(session, (raw - mean) / std)
    names = manifest["class_names"]
    return [
        {"class": names[best], "probability": round(float(row[best]), 6)}
        for row, best in zip(scores, scores.argmax(axis=1), strict=True)
    ]
