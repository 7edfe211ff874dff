"""Stops training at a NaN or infinite loss, before any checkpoint can take in its weights."""

import pytorch_lightning as pl
import torch

from ..console import Diverged
from ..records import is_logging_step

NOT_SEEN = torch.iinfo(torch.int64).max


class StopOnNonFiniteLoss(pl.Callback):
    """Raises one clear line naming the first step whose loss was NaN or infinite.

    The losses stay on the device and are read on the host only at logging steps, at the end of
    each epoch and before each checkpoint is written: reading each one at its own step would make
    the host wait for the GPU every step. A few steps may run on broken weights until then, but
    no checkpoint ever holds them.
    """

    def __init__(self):
        self._losses: list[torch.Tensor] = []  # since the last check
        self._steps: list[int] = []

    def on_before_backward(self, trainer, pl_module, loss: torch.Tensor) -> None:
        self._losses.append(loss.detach())
        self._steps.append(trainer.global_step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if is_logging_step(trainer, trainer.global_step):
            self._check(trainer)

    def on_train_epoch_end(self, trainer, pl_module):
        self._check(trainer)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        self._check(trainer)

    def _check(self, trainer) -> None:
        # Nothing new since the last check (e.g. a second checkpoint in the same epoch): every
        # rank takes the same steps, so all of them skip together.
        if not self._losses:
            return
        finite = torch.isfinite(torch.stack(self._losses))
        steps = torch.tensor(self._steps, device=finite.device)
        first_bad = torch.where(finite, NOT_SEEN, steps).min()
        self._losses, self._steps = [], []
        # Decided together: a bad loss on one rank reaches every rank through the gradient
        # all-reduce, and a rank that stopped alone would leave the others waiting.
        step = int(trainer.strategy.reduce(first_bad, reduce_op="min"))
        if step != NOT_SEEN:
            raise Diverged(
                f"training stopped: train/loss is NaN or infinite at step {step} "
                f"(epoch {trainer.current_epoch}); no checkpoint holds its weights. "
                "Lower model.optimizer.lr or set trainer.gradient_clip_val"
            )
