"""Files a run leaves in its output directory."""

from pathlib import Path

import torch
from pytorch_lightning.utilities import rank_zero_only

from .files import save_json


def plain_metrics(metrics: dict) -> dict:
    """Lightning's metric tensors as floats, ready for JSON."""
    return {
        name: value.item() if isinstance(value, torch.Tensor) else value
        for name, value in metrics.items()
    }


@rank_zero_only
def write_json(path: str | Path, data: dict) -> None:
    """Writes on rank zero only, through a temporary file (see `files.staged`)."""
    save_json(path, data)
