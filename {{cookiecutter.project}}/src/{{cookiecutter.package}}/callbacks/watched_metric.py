"""Stops at the first validation, in one line, when a callback watches a metric the model does
not log."""

import pytorch_lightning as pl

from ..console import UserError


class RequireWatchedMetrics(pl.Callback):
    """Checkpointing and early stopping watch `model.monitor`. The project's models check it
    themselves; a LightningModule of the user's own that logs no such metric would otherwise
    reach Lightning's own error, a traceback, when the first epoch ends. Placed before the
    callbacks that read the metric, so that it speaks first."""

    def on_validation_end(self, trainer, pl_module):
        if trainer.sanity_checking:  # a few batches only: a module may log at epoch end alone
            return
        logged = trainer.callback_metrics
        for callback in trainer.callbacks:
            watched = getattr(callback, "monitor", None)
            if watched and watched not in logged:
                raise UserError(
                    f"{type(callback).__name__} watches {watched}, which the model does not "
                    f"log; set model.monitor to one it logs: {', '.join(sorted(logged))}"
                )
