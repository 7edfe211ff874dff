"""Stops at the first validation, in one line, when a callback watches a metric the model does
not log."""

import pytorch_lightning as pl
from pytorch_lightning.utilities.model_helpers import is_overridden

from ..console import UserError


class RequireWatchedMetrics(pl.Callback):
    """Checkpointing and early stopping watch `model.monitor`. The project's models check it
    themselves; a LightningModule of the user's own that logs no such metric would otherwise
    reach Lightning's own error, a traceback, when the first epoch ends. Placed before the
    callbacks that read the metric, so that it speaks first."""

    def on_validation_end(self, trainer, pl_module):
        if trainer.sanity_checking:  # a few batches only: a module may log at epoch end alone
            return
        self.require(trainer, "")

    def on_train_epoch_end(self, trainer, pl_module):
        # Without validation, the callbacks read the metric here, at the end of each epoch.
        if not is_overridden("validation_step", pl_module):
            self.require(trainer, f" ({type(pl_module).__name__} defines no validation_step)")

    def require(self, trainer, why: str) -> None:
        logged = trainer.callback_metrics
        for callback in trainer.callbacks:
            watched = getattr(callback, "monitor", None)
            if watched and watched not in logged:
                raise UserError(
                    f"{type(callback).__name__} watches {watched}, which the model does not "
                    f"log{why}; set model.monitor to one it logs: {', '.join(sorted(logged))}"
                )
