"""What a run records: its resolved config, the model's size, the commit and the versions used,
its metrics, and which steps reach the loggers."""

import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.utilities import rank_zero_only
from rich.console import Console
from rich.syntax import Syntax
from rich.tree import Tree

from .console import format_table, log_only
from .files import save_json, save_text

PROJECT = {{ cookiecutter.project | tojson }}


@rank_zero_only
def record_run(cfg: DictConfig, model: torch.nn.Module, trainer: pl.Trainer) -> None:
    """Prints the config as a tree and writes config_tree.log, config.yaml (resolved) and run.json
    to the run directory; every logger gets the resolved config plus this metadata as `run`."""
    output_dir = Path(cfg.paths.output_dir)
    console = Console(record=True)  # prints, and keeps the text for config_tree.log
    console.print(config_tree(cfg))
    save_text(output_dir / "config_tree.log", console.export_text())
    save_text(output_dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))

    metadata = {
        "parameters": count_parameters(model),
        "git": git_state(Path(__file__).parent),
        "versions": versions(),
    }
    write_json(output_dir / "run.json", metadata)
    for logger in trainer.loggers:
        logger.log_hyperparams(OmegaConf.to_container(cfg, resolve=True) | {"run": metadata})


def config_tree(cfg: DictConfig) -> Tree:
    """One branch per config group, values resolved."""
    tree = Tree("config", guide_style="dim")
    for key, value in cfg.items():
        if OmegaConf.is_config(value):
            tree.add(str(key)).add(Syntax(OmegaConf.to_yaml(value, resolve=True), "yaml"))
        else:
            tree.add(f"{key}: {value}")
    return tree


def count_parameters(model: torch.nn.Module) -> dict:
    total = sum(parameter.numel() for parameter in model.parameters())
    trainable = sum(
        parameter.numel() for parameter in model.parameters() if parameter.requires_grad
    )
    return {"total": total, "trainable": trainable, "frozen": total - trainable}


def git_state(directory: Path) -> dict:
    """The commit checked out at `directory` and whether any file differs from it (untracked
    files included); None for both outside a git work tree or without git."""

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["git", *args], cwd=directory, capture_output=True, text=True, timeout=30
        )

    try:
        head, status = git("rev-parse", "HEAD"), git("status", "--porcelain")
    except (OSError, subprocess.TimeoutExpired):
        return {"commit": None, "dirty": None}
    if head.returncode or status.returncode:
        return {"commit": None, "dirty": None}
    return {"commit": head.stdout.strip(), "dirty": bool(status.stdout.strip())}


def versions() -> dict:
    try:
        project = version(PROJECT)
    except PackageNotFoundError:  # run from a source tree that was never pip-installed
        project = None
    return {
        "python": platform.python_version(),
        "torch": str(torch.__version__),  # a str subclass that YAML writers cannot represent
        "pytorch_lightning": pl.__version__,
        PROJECT: project,
    }


def plain_metrics(metrics: dict) -> dict:
    """Lightning's metric tensors as floats, ready for JSON."""
    return {
        name: value.item() if isinstance(value, torch.Tensor) else value
        for name, value in metrics.items()
    }


@rank_zero_only
def log_metrics(metrics: dict) -> None:
    """Keeps the values of metrics.json in the run's log too: Lightning prints its table of test
    metrics on the console only."""
    log_only(format_table(["metric", "value"], [[k, v] for k, v in sorted(metrics.items())]))


@rank_zero_only
def write_json(path: str | Path, data: dict) -> None:
    """Writes on rank zero only, through a temporary file (see `files.staged`)."""
    save_json(path, data)


def is_logging_step(trainer: pl.Trainer, step: int) -> bool:
    """Whether optimizer step number `step` (counted from 1) is one whose logged values reach the
    loggers: every `trainer.log_every_n_steps`-th, none when it is 0.

    Work done only for logging (a `self.log` call, a gradient norm, a read on the host) belongs on
    these steps alone: on the others Lightning would drop the value.
    """
    every = trainer.log_every_n_steps
    return every > 0 and step % every == 0
