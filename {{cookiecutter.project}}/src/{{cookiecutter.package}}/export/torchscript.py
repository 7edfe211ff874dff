"""TorchScript: `model.ts`, for runtimes that load TorchScript (LibTorch in C++, older servers)."""

import warnings
from contextlib import contextmanager
from pathlib import Path

import torch

from ..console import show
from ..files import staged
from ..upstream import is_jit_deprecation, scripting_lightning_module
from .verify import Runner, torch_runner

FILE = "model.ts"
_deprecation_noted = False


@contextmanager
def _deprecation_noted_once():
    """Recent torch deprecates torch.jit and warns on every call: say so in one line, once.

    Other warnings raised inside the block are passed on unchanged.
    """
    global _deprecation_noted
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for warning in caught:
        message = str(warning.message)
        if not is_jit_deprecation(warning):
            warnings.warn_explicit(message, warning.category, warning.filename, warning.lineno)
        elif not _deprecation_noted:
            show(f"note: {message} model.ts is still written for runtimes that load TorchScript.")
            _deprecation_noted = True


def save(net: torch.nn.Module, example: torch.Tensor, path: Path, method: str) -> None:
    # Tracing records the operations run on a real batch; scripting compiles the Python code,
    # control flow included, but accepts only the TorchScript subset of Python.
    # A LightningModule exported whole (one without a `net`) has a `trainer` property that raises
    # outside a Trainer, and TorchScript reads every property: Lightning's own to_torchscript
    # turns that check off the same way.
    with _deprecation_noted_once(), scripting_lightning_module():
        module = torch.jit.trace(net, example) if method == "trace" else torch.jit.script(net)
        with staged(path) as partial:
            torch.jit.save(module, partial)


def load(path: Path) -> Runner:
    with _deprecation_noted_once():
        return torch_runner(torch.jit.load(path, map_location="cpu"))
