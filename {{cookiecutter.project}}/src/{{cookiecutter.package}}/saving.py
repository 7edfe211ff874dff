"""Saving checkpoints: atomically, and with what eval and export rebuild the model from."""

import copy

import pytorch_lightning as pl
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.plugins.io import TorchCheckpointIO

from .files import staged


class AtomicCheckpointIO(TorchCheckpointIO):
    """Writes each checkpoint to a temporary file and renames it into place, so a run killed while
    saving keeps its previous checkpoint whole. Lightning's own writer truncates the file first."""

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        with staged(path) as partial:
            super().save_checkpoint(checkpoint, partial, storage_options)


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
