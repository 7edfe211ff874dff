"""Saving checkpoints: atomically, and with what eval and export rebuild the model from."""

import copy
from collections import OrderedDict

import pytorch_lightning as pl
import torch
from lightning_fabric.utilities.apply_func import apply_to_collection
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.plugins.io import AsyncCheckpointIO, TorchCheckpointIO

from .files import staged
from .upstream import write_in_background

# What a checkpoint holds besides tensors and containers, most of it; `snapshot` hands anything
# else to Lightning's walk, which knows every kind of collection (a dataclass, a namedtuple).
LEAVES = {int, float, str, bool, type(None)}


class AtomicCheckpointIO(TorchCheckpointIO):
    """Writes each checkpoint to a temporary file and renames it into place, so a run killed while
    saving keeps its previous checkpoint whole. Lightning's own writer truncates the file first."""

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        with staged(path) as partial:
            super().save_checkpoint(checkpoint, partial, storage_options)


class SnapshotCheckpointIO(AsyncCheckpointIO):
    """Lightning's asynchronous writer: a thread writes each checkpoint while training goes on,
    from copies of its tensors taken when it is saved. The copies are `snapshot`'s: Lightning's
    own walk, which tests every value against every kind of collection, took four times as long
    on the example's checkpoint, in the training thread, at every save."""

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        write_in_background(self, snapshot(checkpoint), path, storage_options)


def snapshot(value):
    """`value` with each tensor in it replaced by a copy that training can no longer change."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if type(value) in (dict, OrderedDict):
        return type(value)((key, snapshot(item)) for key, item in value.items())
    if type(value) in (list, tuple):
        return type(value)(snapshot(item) for item in value)
    if type(value) in LEAVES:
        return value
    return apply_to_collection(value, torch.Tensor, snapshot)


class ConfigInCheckpoint(pl.Callback):
    """Records in every checkpoint what eval and export rebuild from: the model's and the data's
    config, each with its `_target_`, and the data contract (how inputs were prepared)."""

    def __init__(self, model: DictConfig, data: DictConfig):
        self.model, self.data = model, data
        self.resolved: dict | None = None

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        # Resolved at the first save only: the configs do not change during a run, and resolving
        # them took longer than the rest of a save of the example's checkpoint.
        if self.resolved is None:
            self.resolved = {
                "model": OmegaConf.to_container(self.model, resolve=True),
                "data": OmegaConf.to_container(self.data, resolve=True),
            }
        contract = getattr(trainer.datamodule, "contract", None)
        checkpoint["config"] = copy.deepcopy(self.resolved) | {
            "contract": contract.to_dict() if contract else None
        }
