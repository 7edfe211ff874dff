"""Export: write each format, reload it from disk, check it against the eager model, report."""

import importlib
import os
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
from omegaconf import DictConfig
from torch.utils.data import DataLoader

from .. import kinds, targets
from ..builders import build_trained
from ..console import UserError, show
from ..contract import Input, manifest_schema
from ..export import (
    onnx,
    onnx_int8,
    onnx_optimized,
    report,
    torch_export,
    torchscript,
    triton,
)
from ..export.verify import Runner, measure, parity, split_metric, torch_runner
from ..files import move_files, save_json, save_text, sha256, staged_folder
from ..input_checks import export_options
from ..models import Transformer
from ..options import FORMATS, FROM_ONNX, ExportOptions, usable_cores

# Each format is the module of its name in export/.
MODULES = {name: importlib.import_module(f"..export.{name}", __package__) for name in FORMATS}


def savers(
    options: ExportOptions,
    net: torch.nn.Module,
    example: torch.Tensor,
    datamodule: pl.LightningDataModule,
    staging: Path,
) -> dict:
    """Each format's `save(path)`, with the options it takes. Those made from model.onnx read it
    in `staging`, and return how they made their file, for the report."""
    dynamic_shapes = (model_dims(datamodule.contract.input),)
    fp32 = staging / onnx.FILE
    # onnxruntime's transformer optimizer fuses a transformer's graph, given its heads and width.
    # A pretrained backbone says its own, or None (models/pretrained.py).
    attention = getattr(net, "attention", None)
    if isinstance(net, Transformer):
        attention = (net.heads, net.dim)

    def calibration() -> np.ndarray:  # read only for a static quantization
        # Training samples as evaluation prepares them: unaugmented, the same at every export.
        training = partial(datamodule.loader, "train", as_evaluated=True)
        return first_samples(training, options.calibration_samples).numpy()

    return {
        "onnx": partial(
            onnx.save, net, example, dynamic_shapes=dynamic_shapes, opset=options.opset
        ),
        "torchscript": partial(torchscript.save, net, example, method=options.torchscript_method),
        "torch_export": partial(torch_export.save, net, example, dynamic_shapes=dynamic_shapes),
        "onnx_int8": partial(onnx_int8.save, fp32, calibration=calibration),
        "onnx_optimized": partial(onnx_optimized.save, fp32, attention=attention),
        "triton": partial(triton.save, fp32, **options.triton.model_dump()),
    }


def model_dims(sample: Input) -> dict[int, torch.export.Dim]:
    """The dimensions of a batch that an export leaves open: the batch size, and the input
    kind's dynamic axes (a text's tokens) up to their size in training; every other as in
    training."""
    dims = {0: torch.export.Dim("batch", min=1)}
    for axis, name in kinds.dynamic_axes(sample.kind).items():
        dims[1 + axis] = torch.export.Dim(name, min=1, max=sample.shape[axis])
    return dims


def shorter(inputs: np.ndarray, kind: str) -> dict[str, np.ndarray]:
    """`inputs` cut along each dynamic axis of the kind to half its size and to one, by what
    was cut (`tokens=8`): an export must agree with the eager model there too."""
    cuts = {}
    for axis, name in kinds.dynamic_axes(kind).items():
        size = inputs.shape[1 + axis]
        for length in sorted({max(1, size // 2), 1}, reverse=True):
            cuts[f"{name}={length}"] = inputs.take(range(length), axis=1 + axis)
    return cuts


def load_net_and_samples(
    options: ExportOptions, allowed: list[str], data: DictConfig | None
) -> tuple[torch.nn.Module, torch.Tensor, pl.LightningDataModule]:
    """The checkpoint's network in eval mode, and held-out samples prepared exactly as in training.

    The plain network is exported rather than the LightningModule: its forward is the same, and
    it carries no trainer, metrics or Lightning hooks into the artifact.
    """
    model, datamodule = build_trained(options.ckpt_path, allowed, data)
    net = getattr(model, "net", model).eval()
    if type(net).forward in (torch.nn.Module.forward, pl.LightningModule.forward):
        raise UserError(
            f"{type(net).__name__} defines no forward, which is what an export holds: give it "
            "forward(self, x) returning its outputs (class logits, or the predicted number)"
        )
    datamodule.prepare_data()
    datamodule.setup("test")
    # At least two: torch.export would fix the batch size of a one-sample example to 1.
    needed = max(*options.batch_sizes, 2)
    samples = first_samples(datamodule.test_dataloader, needed)
    if len(samples) < needed:  # a small table: its batches repeat the test samples
        show(f"note: batches of up to {needed} repeat the {len(samples)} test samples")
        samples = samples.repeat(-(-needed // len(samples)), *[1] * (samples.dim() - 1))
    with torch.inference_mode():
        outputs = net(samples[:2])
    if not isinstance(outputs, torch.Tensor):
        raise UserError(
            f"{type(net).__name__}.forward returns a {type(outputs).__name__}, and an export "
            "holds one tensor: return the outputs alone (class logits, or the predicted number) "
            "and compute the rest in another method"
        )
    return net, samples[:needed], datamodule


def first_samples(loader: Callable[[], DataLoader], count: int) -> torch.Tensor:
    """The inputs of the first `count` samples (or all, if fewer) of a new `loader()`."""
    batches, seen = [], 0
    for inputs, _ in loader():
        batches.append(inputs)
        seen += len(inputs)
        if seen >= count:
            break
    return torch.cat(batches)[:count]


def measured(
    run: Runner,
    eager: Runner,
    inputs: np.ndarray,
    timing: dict,
    datamodule: pl.LightningDataModule,
) -> dict:
    """Parity with the eager model and latency on `inputs`, parity on them cut shorter where
    the input kind allows, and the metric on the test split."""
    contract = datamodule.contract
    task = targets.get(contract.target.task)
    held_out = ((x.numpy(), y.numpy()) for x, y in datamodule.test_dataloader())
    metric = split_metric(run, held_out, task)
    cuts = shorter(inputs, contract.input.kind)
    cut = {name: parity(run, eager(x), x, task) for name, x in cuts.items()}
    return measure(run, eager, inputs, task, **timing) | {"parity_shorter": cut, "metric": metric}


def export(cfg: DictConfig) -> dict:
    """Writes the requested formats with manifest.json and report.json; returns the report.

    Everything is written to `<output_dir>.staging` first and moved into `output_dir` only once
    every format passed its checks: an earlier export there stays whole until then.
    """
    options = export_options(cfg)
    net, samples, datamodule = load_net_and_samples(options, cfg.allowed_targets, cfg.get("data"))
    eager = torch_runner(net)
    inputs = samples.numpy()
    if not np.isfinite(eager(inputs)).all():
        raise UserError(
            f"{options.ckpt_path} gives NaN or infinite outputs on the test samples (did training "
            "diverge?): nothing to check an export against; export an earlier checkpoint"
        )
    destination = Path(options.output_dir).absolute()  # output_dir=. has a name too
    with staged_folder(destination, "output_dir=...") as staging:
        timing = {"batch_sizes": options.batch_sizes, **options.latency.model_dump()}
        results = {"eager": measured(eager, eager, inputs, timing, datamodule)}
        files, save = {}, savers(options, net, samples, datamodule, staging)
        for name in sorted(options.formats, key=lambda name: name in FROM_ONNX):
            files[name] = staging / MODULES[name].FILE
            how = save[name](files[name]) or {}
            # Measured on the artifact as reloaded from disk, not on the object that wrote it.
            results[name] = measured(
                MODULES[name].load(files[name]), eager, inputs, timing, datamodule
            )
            results[name] |= how | report.facts(name, files[name], results, inputs[:1])

        failed = report.failures(results, options.atol, options.max_metric_drop)
        load, cores = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0, usable_cores()
        noisy = report.latency_warning(results, options.latency.repeats, load, cores)
        summary = {
            "atol": options.atol,
            "max_metric_drop": options.max_metric_drop,
            "passed": not failed,
            "failures": failed,
            "fastest_onnx_variant": report.fastest(results),
            "latency_warning": noisy,
            "load_average": load,
            "cores": cores,
            "results": results,
        }
        save_json(staging / "report.json", summary)
        show(report.table(results, files, staging, speedups=not noisy))
        if noisy:
            show(noisy)
        if summary["fastest_onnx_variant"]:
            by_size = summary["fastest_onnx_variant"].items()
            show(f"fastest ONNX variant: {', '.join(f'{v} at batch {n}' for n, v in by_size)}")
        # What each format adds to the export folder: its file, or the folder holding it
        # (triton/), and those of an earlier export that this one does not describe.
        written = sorted({path.relative_to(staging).parts[0] for path in files.values()})
        stale = sorted({Path(f.FILE).parts[0] for f in MODULES.values()} - set(written))
        if failed:
            if (destination / "manifest.json").exists():
                raise UserError(
                    f"{failed[0]}; the earlier export in {destination} is unchanged, this attempt "
                    f"is in {staging} to inspect"
                )
            move_files(staging, destination, [*written, "report.json"], [*stale, report.SCHEMA])
            staging.rmdir()
            raise UserError(
                f"{failed[0]}; the artifacts stay in {destination} to inspect, without "
                "manifest.json"
            )
        contract = datamodule.contract
        extra = kinds.get(contract.input.kind).files(contract.preprocessing)
        for name, text in extra.items():
            save_text(staging / name, text)
        checksums = {name: sha256(staging / name) for name in extra}
        manifest = report.manifest(
            files, results, contract, options.opset, Path(options.ckpt_path), checksums, staging
        )
        save_json(staging / "manifest.json", manifest.to_dict())
        save_json(staging / report.SCHEMA, manifest_schema(manifest))
        kept = [*written, *extra, "report.json", "manifest.json", report.SCHEMA]
        move_files(staging, destination, kept, stale)
        staging.rmdir()
        show(f"exported {', '.join(files)} to {destination}")
        return summary
