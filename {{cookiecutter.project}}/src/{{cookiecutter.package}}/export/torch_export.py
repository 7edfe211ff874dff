"""torch.export: one whole-graph program, `model.pt2`, for ExecuTorch, AOTInductor and others."""

from pathlib import Path

import torch

from ..files import staged
from .verify import Runner, torch_runner

FILE = "model.pt2"


def save(net: torch.nn.Module, example: torch.Tensor, path: Path, dynamic_shapes: tuple) -> None:
    program = torch.export.export(net, (example,), dynamic_shapes=dynamic_shapes)
    with staged(path) as partial:
        torch.export.save(program, partial)


def load(path: Path) -> Runner:
    return torch_runner(torch.export.load(path).module())
