"""torch.export: one whole-graph program, `model.pt2`, for ExecuTorch, AOTInductor and others."""

from pathlib import Path

import torch

from ..utils.files import staged
from .verify import Runner, torch_runner

FILE = "model.pt2"


def dynamic_batch() -> tuple:
    """Dynamic shapes for the network's one input: any batch size, the rest as in training."""
    return ({0: torch.export.Dim("batch", min=1)},)


def save(net: torch.nn.Module, example: torch.Tensor, path: Path, cfg) -> None:
    program = torch.export.export(net, (example,), dynamic_shapes=dynamic_batch())
    with staged(path) as partial:
        torch.export.save(program, partial)


def load(path: Path) -> Runner:
    return torch_runner(torch.export.load(path).module())
