"""Export: write each format, reload it from disk, check it against the eager model, report."""

from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, ListConfig
from torch.utils.data import DataLoader

from ..builders import build_trained
from ..console import UserError, show
from ..export import onnx, onnx_int8, onnx_optimized, report, torch_export, torchscript
from ..export.verify import Runner, measure, split_metric, torch_runner
from ..files import fresh_folder, move_files, save_json
from ..models import Transformer
from ..run_dir import unwritable

FORMATS = {
    "onnx": onnx,
    "torchscript": torchscript,
    "torch_export": torch_export,
    "onnx_int8": onnx_int8,
    "onnx_optimized": onnx_optimized,
}
# Made from model.onnx: written after it.
FROM_ONNX = ("onnx_int8", "onnx_optimized")


def savers(
    cfg: DictConfig,
    net: torch.nn.Module,
    example: torch.Tensor,
    datamodule: pl.LightningDataModule,
    staging: Path,
) -> dict:
    """Each format's `save(path)`, with the options the config gives it. Those made from
    model.onnx read it in `staging`, and return how they made their file, for the report."""
    # Any batch size; every other dimension as in training.
    dynamic_shapes = ({0: torch.export.Dim("batch", min=1)},)
    fp32 = staging / onnx.FILE
    # onnxruntime's transformer optimizer fuses a transformer's graph, given its heads and width.
    attention = (net.heads, net.dim) if isinstance(net, Transformer) else None

    def calibration() -> np.ndarray:  # read only for a static quantization
        # Training samples as evaluation prepares them: unaugmented, the same at every export.
        training = partial(datamodule.loader, "train", as_evaluated=True)
        return first_samples(training, cfg.calibration_samples).numpy()

    return {
        "onnx": partial(onnx.save, net, example, dynamic_shapes=dynamic_shapes, opset=cfg.opset),
        "torchscript": partial(torchscript.save, net, example, method=cfg.torchscript_method),
        "torch_export": partial(torch_export.save, net, example, dynamic_shapes=dynamic_shapes),
        "onnx_int8": partial(onnx_int8.save, fp32, calibration=calibration, attention=attention),
        "onnx_optimized": partial(onnx_optimized.save, fp32, attention=attention),
    }


def check_config(cfg: DictConfig) -> None:
    """Fails on a bad option before anything slow runs."""
    if not cfg.get("ckpt_path"):
        raise UserError("export needs a checkpoint: pass ckpt_path=<path to a .ckpt file>")
    if not isinstance(cfg.formats, ListConfig) or not cfg.formats:
        raise UserError(
            f"formats={cfg.formats} must be a list of formats, e.g. formats=[onnx]; choose from "
            f"{', '.join(FORMATS)}"
        )
    unknown = [name for name in cfg.formats if name not in FORMATS]
    if unknown:
        raise UserError(
            f"unknown format {', '.join(map(repr, unknown))} in formats; "
            f"choose from {', '.join(FORMATS)}"
        )
    if cfg.torchscript_method not in torchscript.METHODS:
        raise UserError(
            f"torchscript_method={cfg.torchscript_method!r} is unknown; "
            f"choose {' or '.join(torchscript.METHODS)}"
        )
    derived = [name for name in cfg.formats if name in FROM_ONNX]
    if derived and "onnx" not in cfg.formats:
        raise UserError(
            f"{derived[0]} is made from model.onnx: add onnx to formats, e.g. "
            f"formats=[onnx,{','.join(derived)}]"
        )
    newest = onnx.newest_opset()
    if type(cfg.opset) is not int or not onnx.OLDEST_OPSET <= cfg.opset <= newest:
        raise UserError(
            f"opset={cfg.opset} must be a whole number from {onnx.OLDEST_OPSET} (what torch's "
            f"exporter writes) to {newest} (the newest this onnx knows)"
        )
    if type(cfg.atol) not in (int, float) or not cfg.atol >= 0:
        raise UserError(f"atol={cfg.atol} must be a number, 0 or more: e.g. atol=1e-4")
    for name in ("warmup", "repeats"):
        value, lowest = cfg.latency[name], int(name == "repeats")
        if type(value) is not int or value < lowest:
            raise UserError(f"latency.{name}={value} must be a whole number of at least {lowest}")
    if not all(isinstance(size, int) and size > 0 for size in cfg.batch_sizes):
        raise UserError(f"batch_sizes={list(cfg.batch_sizes)} must be positive whole numbers")
    if type(cfg.max_metric_drop) not in (int, float) or not cfg.max_metric_drop >= 0:
        raise UserError(
            f"max_metric_drop={cfg.max_metric_drop} must be a number of points, 0 or more: "
            "e.g. 0.5, half a percentage point of accuracy"
        )
    if type(cfg.calibration_samples) is not int or cfg.calibration_samples < 1:
        raise UserError(
            f"calibration_samples={cfg.calibration_samples} must be a whole number of at least 1"
        )
    if Path(cfg.output_dir).is_file():
        raise UserError(f"output_dir={cfg.output_dir} is a file; pass a folder for the export")
    # Beside output_dir: the staging folder, and the export once it passed.
    problem = unwritable(Path(cfg.output_dir).absolute().parent, setting="output_dir=...")
    if problem:
        raise UserError(problem)


def load_net_and_samples(
    cfg: DictConfig,
) -> tuple[torch.nn.Module, torch.Tensor, pl.LightningDataModule]:
    """The checkpoint's network in eval mode, and held-out samples prepared exactly as in training.

    The plain network is exported rather than the LightningModule: its forward is the same, and
    it carries no trainer, metrics or Lightning hooks into the artifact.
    """
    model, datamodule = build_trained(cfg.ckpt_path, cfg.allowed_targets, cfg.get("data"))
    net = getattr(model, "net", model).eval()
    datamodule.prepare_data()
    datamodule.setup("test")
    # At least two: torch.export would fix the batch size of a one-sample example to 1.
    needed = max(*cfg.batch_sizes, 2)
    samples = first_samples(datamodule.test_dataloader, needed)
    if len(samples) < needed:  # a small table: its batches repeat the test samples
        show(f"note: batches of up to {needed} repeat the {len(samples)} test samples")
        samples = samples.repeat(-(-needed // len(samples)), *[1] * (samples.dim() - 1))
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
    """Parity with the eager model and latency on `inputs`, and the metric on the test split."""
    task = datamodule.contract["target"]["task"]
    held_out = ((x.numpy(), y.numpy()) for x, y in datamodule.test_dataloader())
    return measure(run, eager, inputs, **timing) | {"metric": split_metric(run, held_out, task)}


def export(cfg: DictConfig) -> dict:
    """Writes the requested formats with manifest.json and report.json; returns the report.

    Everything is written to `<output_dir>.staging` first and moved into `output_dir` only once
    every format passed its checks: an earlier export there stays whole until then.
    """
    check_config(cfg)
    net, samples, datamodule = load_net_and_samples(cfg)
    eager = torch_runner(net)
    inputs = samples.numpy()
    if not np.isfinite(eager(inputs)).all():
        raise UserError(
            f"{cfg.ckpt_path} gives NaN or infinite outputs on the test samples (did training "
            "diverge?): nothing to check an export against; export an earlier checkpoint"
        )
    destination = Path(cfg.output_dir)
    staging = fresh_folder(destination.with_name(f"{destination.name}.staging"))

    timing = {"batch_sizes": list(cfg.batch_sizes), **cfg.latency}
    results = {"eager": measured(eager, eager, inputs, timing, datamodule)}
    files, save = {}, savers(cfg, net, samples, datamodule, staging)
    for name in sorted(cfg.formats, key=lambda name: name in FROM_ONNX):
        files[name] = staging / FORMATS[name].FILE
        how = save[name](files[name]) or {}
        # Measured on the artifact as reloaded from disk, not on the object that wrote it.
        results[name] = measured(
            FORMATS[name].load(files[name]), eager, inputs, timing, datamodule
        )
        results[name] |= how | report.facts(name, files[name], results)

    failed = report.failures(results, cfg.atol, cfg.max_metric_drop)
    summary = {
        "atol": cfg.atol,
        "max_metric_drop": cfg.max_metric_drop,
        "passed": not failed,
        "failures": failed,
        "fastest_onnx_variant": report.fastest(results),
        "results": results,
    }
    save_json(staging / "report.json", summary)
    show(report.table(results, files))
    if summary["fastest_onnx_variant"]:
        by_size = summary["fastest_onnx_variant"].items()
        show(f"fastest ONNX variant: {', '.join(f'{v} at batch {n}' for n, v in by_size)}")
    written = [path.name for path in files.values()]
    # Model files of an earlier export that this one does not describe.
    stale = [f.FILE for f in FORMATS.values() if f.FILE not in written]
    if failed:
        if (destination / "manifest.json").exists():
            raise UserError(
                f"{failed[0]}; the earlier export in {destination} is unchanged, this attempt "
                f"is in {staging} to inspect"
            )
        move_files(staging, destination, [*written, "report.json"], stale)
        staging.rmdir()
        raise UserError(
            f"{failed[0]}; the artifacts stay in {destination} to inspect, without manifest.json"
        )
    manifest = report.manifest(files, results, datamodule.contract, cfg.opset, Path(cfg.ckpt_path))
    save_json(staging / "manifest.json", manifest)
    move_files(staging, destination, [*written, "report.json", "manifest.json"], stale)
    staging.rmdir()
    show(f"exported {', '.join(files)} to {destination}")
    return summary
