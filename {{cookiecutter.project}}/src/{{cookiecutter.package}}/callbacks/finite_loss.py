"""Stops training at the first NaN or infinite loss, before it can reach the weights."""

import pytorch_lightning as pl
import torch

from ..utils.errors import UserError


class StopOnNonFiniteLoss(pl.Callback):
    """Raises one clear line naming the step. The check runs before the backward pass, so the
    weights and every checkpoint saved so far stay as they were."""

    def on_before_backward(self, trainer, pl_module, loss: torch.Tensor) -> None:
        finite = bool(torch.isfinite(loss))
        if trainer.world_size > 1:
            # Decided together: a bad loss on one rank reaches every rank through the gradient
            # all-reduce, and a rank that stopped alone would leave the others waiting for it.
            finite = trainer.strategy.reduce_boolean_decision(finite, all=True)
        if not finite:
            raise UserError(
                f"training stopped: train/loss is NaN or infinite at step {trainer.global_step} "
                f"(epoch {trainer.current_epoch}); checkpoints saved before it are intact. "
                "Lower model.optimizer.lr or set trainer.gradient_clip_val"
            )
