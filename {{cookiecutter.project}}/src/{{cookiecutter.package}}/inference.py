"""Predictions from an exported model with numpy and onnxruntime, and what the input kind needs
(Pillow for images, pandas for tables): predict and serve use it. The manifest holds the data
contract of training; the input kind's module (kinds/) prepares inputs with the same code the
datamodules prepare training data with, and the task's module (targets/) reads the outputs.

Nothing here may import torch or Lightning, directly or through other modules of this package,
so that it runs in a slim serving environment.
"""

from pathlib import Path
from types import ModuleType

import numpy as np
import onnxruntime as ort
from onnxruntime.capi.onnxruntime_pybind11_state import (
    Fail,
    InvalidGraph,
    InvalidProtobuf,
    NotImplemented,
)

from . import kinds, targets
from .console import UserError
from .contract import Artifact, Manifest
from .files import sha256
from .onnx_session import VARIANTS, open_session, run
from .run_dir import checkpoint_in

CHUNK = 256  # samples per onnxruntime call, which bounds memory on large inputs


def not_an_export(path: Path) -> str:
    """Why `path` holds no export: a training run or a checkpoint is exported first."""
    checkpoint = checkpoint_in(path) if path.is_dir() else path
    if checkpoint and checkpoint.suffix == ".ckpt" and checkpoint.is_file():
        what = "a checkpoint"
        if path.is_dir():  # a run's folder, or its checkpoints/ folder
            what = "a training run" if checkpoint.parent != path else "a folder of checkpoints"
        return (
            f"model={str(path)!r} is {what}, not an export: export it first (python export.py "
            f"ckpt_path={checkpoint}), then pass model=<the export's folder>"
        )
    if (path / "manifest.json").is_file():  # an export without its model: a partial copy
        return f"{path} lacks model.onnx, which its manifest lists; copy all of it or export again"
    if not path.exists():
        return f"model={str(path)!r} does not exist; pass model=<export dir>"
    return (
        f"model={str(path)!r} is neither an .onnx file nor a folder with model.onnx; "
        "pass model=<export dir>"
    )


def load_export(
    path: Path, threads: int = 0, variant: str = "fp32"
) -> tuple[ort.InferenceSession, Manifest]:
    """The session of one ONNX variant of an export (fp32: model.onnx, int8: model.int8.onnx,
    optimized: model.optimized.onnx), and the manifest.json export.py wrote beside it, checked
    against each other before anything is predicted. `path` is the export's folder, or the
    variant's file in it."""
    model = path / "model.onnx" if path.is_dir() else path
    if not model.is_file() or model.suffix == ".ckpt":
        raise UserError(not_an_export(path))
    manifest_path = model.parent / "manifest.json"
    if not manifest_path.is_file():
        raise UserError(f"no manifest.json next to {model}; pass the folder of an export.py run")
    manifest = Manifest.read(manifest_path)
    entry = variant_entry(manifest, variant, model.parent)
    if path.is_dir():
        model = path / entry.file
        if not model.is_file():
            raise UserError(f"{path} lacks {entry.file}, which its manifest lists; export again")
    if model.suffix != ".onnx":
        message = f"{model} is not an ONNX model; expected the model.onnx that export.py writes"
        raise UserError(message)
    if model.name != entry.file:
        raise UserError(
            f"{model} is not the variant={variant} model of its export, {entry.file} is: pass "
            "model=<export dir> with the variant to run (fp32, int8 or optimized)"
        )
    # Checked before onnxruntime reads the file: a damaged model may still parse, and fail there.
    if sha256(model) != entry.sha256:
        raise UserError(f"{model} is not the model that {manifest_path} describes; export again")
    for name, checksum in manifest.files.items():
        path = model.parent / name
        if not path.is_file() or sha256(path) != checksum:
            raise UserError(f"{path} is not the file that {manifest_path} lists; export again")
    try:
        session = open_session(model, threads)
    except (InvalidProtobuf, InvalidGraph, NotImplemented, Fail) as error:  # the export's file
        reason = str(error).strip().split("\n")[0]
        raise UserError(
            f"onnxruntime {ort.__version__} cannot run {model} ({reason}); run it with the "
            f"onnxruntime export.py checked it in ({manifest.versions.get('onnxruntime')}), or "
            "export again"
        ) from None
    check_manifest(manifest, session, manifest_path)
    if manifest.digest_of(entry) != entry.digest:  # what the checks above cannot see
        raise UserError(
            f"{manifest_path} was edited after export: its input, preprocessing or target no "
            f"longer match the digest recorded for {entry.file}; export again"
        )
    return session, manifest


def variant_entry(manifest: Manifest, variant: str, folder: Path) -> Artifact:
    """The manifest's entry of the ONNX file that `variant` names; one line naming the variants
    the export holds when it holds no such file."""
    held = [name for name, format in VARIANTS.items() if format in manifest.formats]
    if variant not in held:
        raise UserError(
            f"variant={variant} is not an ONNX model of the export in {folder}; it holds "
            f"{', '.join(held) or 'none'}"
        )
    return manifest.formats[VARIANTS[variant]]


def kind_of(manifest: Manifest) -> ModuleType:
    return kinds.get(manifest.input.kind)


def task_of(manifest: Manifest) -> ModuleType:
    return targets.get(manifest.task)


def check_manifest(manifest: Manifest, session: ort.InferenceSession, path: Path) -> None:
    """The manifest must describe the model it sits beside: its input, its outputs, a usable
    preprocessing."""
    expected = session.get_inputs()[0].shape[1:]
    declared = manifest.input.shape[1:]
    if declared != expected:
        raise UserError(
            f"{path} declares inputs of shape {declared}, the model takes {expected}; export again"
        )
    given = session.get_outputs()[0].shape[-1]
    wanted = task_of(manifest).outputs(manifest.target)
    if given != wanted:
        raise UserError(
            f"{path} describes a {manifest.task} of {wanted} outputs, the model has {given}; "
            "export again"
        )
    kind_of(manifest).check(manifest.preprocessing, expected, str(path))


def from_arrays(array: np.ndarray, manifest: Manifest, source: str) -> np.ndarray:
    """Model inputs from raw values, as the dataset stores them, as the input kind takes them."""
    return kind_of(manifest).from_arrays(array, manifest.preprocessing, source)


def load_npy(path: Path) -> np.ndarray:
    """A .npy array; a file of another format so named (an .npz, text) is refused."""
    with path.open("rb") as file:
        if file.read(6) != b"\x93NUMPY":  # the format's magic string
            raise UserError(f"{path} is not a .npy array; write one with numpy.save")
    try:
        return np.load(path, allow_pickle=False)
    except ValueError as error:
        raise UserError(f"{path} is not a numeric .npy array: {error}") from None


def read_inputs(path: Path, manifest: Manifest) -> tuple[np.ndarray, list[dict]]:
    """Model inputs from a .npy array of raw values or the files the input kind reads (images,
    a folder of them, a table), and where each sample came from."""
    if not path.exists():
        raise UserError(
            f"input={str(path)!r} does not exist; pass input=<a file or folder of inputs, or a "
            ".npy array>"
        )
    if path.suffix.lower() == ".npy":
        inputs = from_arrays(load_npy(path), manifest, str(path))
        return inputs, [{"file": str(path), "index": index} for index in range(len(inputs))]
    return kind_of(manifest).read_inputs(path, manifest.preprocessing)


def non_finite(inputs: np.ndarray) -> np.ndarray:
    """For each sample: does it hold a NaN or an infinity?"""
    return ~np.isfinite(inputs.reshape(len(inputs), -1)).all(axis=1)


def check_top_k(top_k) -> int:
    """How many of the most probable classes to list: a whole number of at least 1."""
    if type(top_k) is not int or top_k < 1:
        raise UserError(f"top_k={top_k} must be a whole number of at least 1")
    return top_k


def predictions(
    session: ort.InferenceSession, manifest: Manifest, inputs: np.ndarray, top_k: int = 1
) -> list[dict]:
    """For each (finite) prepared sample, what the task makes of the model's outputs: its class
    and probability (with the `top_k` most probable classes when top_k > 1), or its value."""
    if not len(inputs):
        return []
    return decoded(manifest, outputs(session, inputs), top_k)


def outputs(session: ort.InferenceSession, inputs: np.ndarray) -> np.ndarray:
    """The model's outputs for (some) prepared samples, in calls of at most CHUNK samples."""
    chunks = [inputs[start : start + CHUNK] for start in range(0, len(inputs), CHUNK)]
    return np.concatenate([run(session, chunk) for chunk in chunks])


def decoded(manifest: Manifest, outputs: np.ndarray, top_k: int = 1) -> list[dict]:
    """What the task makes of each sample's outputs."""
    return task_of(manifest).decode(outputs, manifest.target, top_k)
