"""Files a run leaves in its output directory."""

import json
import os
from pathlib import Path

import torch
from pytorch_lightning.utilities import rank_zero_only


def plain_metrics(metrics: dict) -> dict:
    """Lightning's metric tensors as floats, ready for JSON."""
    return {name: value.item() if isinstance(value, torch.Tensor) else value for name, value in metrics.items()}


@rank_zero_only
def write_json(path: str | Path, data: dict) -> None:
    """Writes through a temporary file, so a crash never leaves a half-written file behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(partial, path)
