"""Which training steps Lightning writes to the loggers."""

import pytorch_lightning as pl


def is_logging_step(trainer: pl.Trainer, step: int) -> bool:
    """Whether optimizer step number `step` (counted from 1) is one whose logged values reach the
    loggers: every `trainer.log_every_n_steps`-th, none when it is 0.

    Work done only for logging (a `self.log` call, a gradient norm, a read on the host) belongs on
    these steps alone: on the others Lightning would drop the value.
    """
    every = trainer.log_every_n_steps
    return every > 0 and step % every == 0
