"""Checkpoints: safe loading (tensors and plain containers only, so a checkpoint cannot run
code), atomic writing, and finding the one to resume from."""

import pickle
from pathlib import Path

import torch
from omegaconf import DictConfig
from pytorch_lightning.plugins.io import TorchCheckpointIO

from .console import UserError
from .files import staged
from .models import Classifier


class AtomicCheckpointIO(TorchCheckpointIO):
    """Writes each checkpoint to a temporary file and renames it into place, so a run killed while
    saving keeps its previous checkpoint whole. Lightning's own writer truncates the file first."""

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        with staged(path) as partial:
            super().save_checkpoint(checkpoint, partial, storage_options)


def load_checkpoint(path: str | Path) -> dict:
    """Reads a checkpoint with `weights_only=True`, turning every failure into one clear line."""
    path = Path(path)
    if not path.is_file():
        raise UserError(
            f"ckpt_path {str(path)!r} is not a file; pass ckpt_path=<checkpoint>, "
            "e.g. logs/train/runs/<time>/checkpoints/best.ckpt"
        )
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        # weights_only refuses any global outside tensors and plain containers, before calling it.
        if "GLOBAL" not in str(error):
            raise UserError(
                f"{path} is not a readable checkpoint (truncated or corrupt?)"
            ) from None
        raise UserError(
            f"refusing {path}: it holds pickled objects that could run code when loaded; "
            "only checkpoints of tensors and plain values are accepted"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError) as error:
        reason = str(error).split(".")[0]
        raise UserError(
            f"{path} is not a readable checkpoint (truncated or corrupt?): {reason}"
        ) from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise UserError(f"{path} is not a Lightning checkpoint: it has no state_dict")
    return checkpoint


def load_model(path: str | Path) -> Classifier:
    """The trained model of a checkpoint, rebuilt from its own hyperparameters, in eval mode."""
    checkpoint = load_checkpoint(path)
    model = Classifier(**checkpoint["hyper_parameters"])
    model.load_state_dict(checkpoint["state_dict"])
    return model.eval()


def resume_path(cfg: DictConfig) -> str | None:
    """The checkpoint to resume from: `ckpt_path` if given; else, with `auto_resume`, the run
    directory's newest checkpoint, so rerunning the same command (e.g. after a SLURM requeue)
    continues where the run stopped. Checked before anything starts."""
    path = cfg.ckpt_path
    if not path and cfg.get("auto_resume"):
        run_dir = Path(cfg.paths.output_dir)
        # last.ckpt, or the hpc_ckpt_<n>.ckpt that Lightning saves when SLURM preempts the job.
        saved = [run_dir / "checkpoints" / "last.ckpt", *run_dir.glob("hpc_ckpt_*.ckpt")]
        saved = [file for file in saved if file.is_file()]
        path = str(max(saved, key=lambda file: file.stat().st_mtime)) if saved else None
    if path:
        load_checkpoint(path)  # fails early, with one line, on a bad or unsafe file
    return path
