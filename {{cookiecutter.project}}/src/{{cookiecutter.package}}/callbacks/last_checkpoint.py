"""checkpoints/last.ckpt, written by time as well as by epoch."""

import time

from pytorch_lightning.callbacks import ModelCheckpoint

from ..options import check_seconds


class LastCheckpoint(ModelCheckpoint):
    """The checkpoint to resume a run from: written at the end of an epoch once `min_interval_s`
    seconds have passed since training started or it was last written (0: every epoch), and at the
    end of the last epoch. Epochs shorter than that do not each stop training for a save; a run
    stopped in between resumes from at most that many seconds of training back."""

    def __init__(self, min_interval_s: float = 10.0, **kwargs):
        super().__init__(save_on_train_epoch_end=True, **kwargs)
        self.min_interval_s = check_seconds(min_interval_s, "LastCheckpoint's min_interval_s")
        self.due = 0.0

    def on_train_start(self, trainer, pl_module):
        super().on_train_start(trainer, pl_module)
        self.due = time.monotonic() + self.min_interval_s

    def on_train_epoch_end(self, trainer, pl_module):
        # Rank 0 decides for all: every rank takes part in a save, or none does.
        if trainer.strategy.broadcast(time.monotonic() >= self.due) or last_epoch(trainer):
            super().on_train_epoch_end(trainer, pl_module)
            self.due = time.monotonic() + self.min_interval_s


def last_epoch(trainer) -> bool:
    """Whether training ends with this epoch: its last by max_epochs or max_steps, or stopped (by
    early stopping or max_time, which run before checkpoint callbacks)."""
    epochs, steps = trainer.max_epochs, trainer.max_steps
    return (
        trainer.should_stop
        or (epochs not in (None, -1) and trainer.current_epoch + 1 >= epochs)
        or (steps != -1 and trainer.global_step >= steps)
    )
