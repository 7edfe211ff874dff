"""Safe checkpoint loading: tensors and plain containers only, so a checkpoint cannot run code."""

import pickle
from pathlib import Path

import torch

from ..models import Classifier
from .errors import UserError


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
