"""Export: write each format, reload it from disk, check it against the eager model, report."""

from functools import partial
from pathlib import Path

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig

from ..builders import build_trained
from ..console import UserError
from ..export import onnx, report, torch_export, torchscript
from ..export.verify import measure, torch_runner
from ..files import fresh_folder, move_files, save_json

FORMATS = {"onnx": onnx, "torchscript": torchscript, "torch_export": torch_export}


def savers(cfg: DictConfig) -> dict:
    """Each format's `save(net, example, path)`, with the options the config gives it."""
    # Any batch size; every other dimension as in training.
    dynamic_shapes = ({0: torch.export.Dim("batch", min=1)},)
    return {
        "onnx": partial(onnx.save, dynamic_shapes=dynamic_shapes, opset=cfg.opset),
        "torchscript": partial(torchscript.save, method=cfg.torchscript_method),
        "torch_export": partial(torch_export.save, dynamic_shapes=dynamic_shapes),
    }


def check_config(cfg: DictConfig) -> None:
    """Fails on a bad option before anything slow runs."""
    if not cfg.get("ckpt_path"):
        raise UserError("export needs a checkpoint: pass ckpt_path=<path to a .ckpt file>")
    unknown = [name for name in cfg.formats if name not in FORMATS]
    if unknown or not cfg.formats:
        raise UserError(
            f"unknown format {', '.join(map(repr, unknown))} in formats; "
            f"choose from {', '.join(FORMATS)}"
        )
    if cfg.torchscript_method not in torchscript.METHODS:
        raise UserError(
            f"torchscript_method={cfg.torchscript_method!r} is unknown; "
            f"choose {' or '.join(torchscript.METHODS)}"
        )
    if not all(isinstance(size, int) and size > 0 for size in cfg.batch_sizes):
        raise UserError(f"batch_sizes={list(cfg.batch_sizes)} must be positive whole numbers")
    if Path(cfg.output_dir).is_file():
        raise UserError(f"output_dir={cfg.output_dir} is a file; pass a folder for the export")


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
    needed, batches = max(*cfg.batch_sizes, 2), []
    for inputs, _ in datamodule.test_dataloader():
        batches.append(inputs)
        if sum(map(len, batches)) >= needed:
            break
    samples = torch.cat(batches)[:needed]
    if len(samples) < needed:
        raise UserError(
            f"batch_sizes needs {needed} test samples; the test split holds {len(samples)}"
        )
    return net, samples, datamodule


def export(cfg: DictConfig) -> dict:
    """Writes the requested formats with manifest.json and report.json; returns the report.

    Everything is written to `<output_dir>.staging` first and moved into `output_dir` only once
    every format passed its checks: an earlier export there stays whole until then.
    """
    check_config(cfg)
    net, samples, datamodule = load_net_and_samples(cfg)
    destination = Path(cfg.output_dir)
    staging = fresh_folder(destination.with_name(f"{destination.name}.staging"))
    eager = torch_runner(net)
    inputs = samples.numpy()

    timing = {"batch_sizes": list(cfg.batch_sizes), **cfg.latency}
    results, files, save = {"eager": measure(eager, eager, inputs, **timing)}, {}, savers(cfg)
    for name in cfg.formats:
        files[name] = staging / FORMATS[name].FILE
        save[name](net, samples, files[name])
        # Measured on the artifact as reloaded from disk, not on the object that wrote it.
        results[name] = measure(FORMATS[name].load(files[name]), eager, inputs, **timing)

    failed = report.failures(results, cfg.atol)
    summary = {"atol": cfg.atol, "passed": not failed, "failures": failed, "results": results}
    save_json(staging / "report.json", summary)
    print(report.table(results, files))
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
    manifest = report.manifest(files, datamodule.contract, cfg.opset, Path(cfg.ckpt_path))
    save_json(staging / "manifest.json", manifest)
    move_files(staging, destination, [*written, "report.json", "manifest.json"], stale)
    staging.rmdir()
    print(f"exported {', '.join(files)} to {destination}")
    return summary
