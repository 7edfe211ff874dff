"""Experiment loggers that stop with one line where Lightning's own would end in a traceback,
that write less often than Lightning's own, or that keep what a resumed run logged before."""

import time
from collections.abc import Mapping

from pytorch_lightning.loggers import CSVLogger as LightningCSVLogger
from pytorch_lightning.loggers import TensorBoardLogger as LightningTensorBoardLogger
from pytorch_lightning.loggers import WandbLogger as LightningWandbLogger
from pytorch_lightning.loggers.logger import rank_zero_experiment
from pytorch_lightning.utilities import rank_zero_only

from .console import UserError
from .upstream import (
    appending_csv_writer,
    event_file_writer,
    leave_out_wandb_anonymous,
    tensorboard_names,
)


class CSVLogger(LightningCSVLogger):
    """Lightning's CSV logger (configs/logger/csv.yaml), whose metrics.csv a resumed run goes on
    with: rerunning an interrupted run's command resumes it in the same folder, and Lightning's
    own deletes the file there. Steps logged after the checkpoint it resumes from are logged
    again, as TensorBoard's files hold them too."""

    @property
    @rank_zero_experiment
    def experiment(self):
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = appending_csv_writer(self.log_dir)
        return self._experiment


class WandbLogger(LightningWandbLogger):
    """Lightning's W&B logger (configs/logger/wandb.yaml). A run that W&B refuses to start, such
    as one without a login, stops with one line that says how to log in or log offline."""

    def __init__(self, **options):
        super().__init__(**options)
        leave_out_wandb_anonymous(self)

    @property
    def experiment(self):
        from wandb.errors import UsageError  # an extra: present once this logger is in use

        try:
            return super().experiment
        except UsageError as error:
            raise UserError(
                f"logger=wandb cannot start a run: {error} Or set WANDB_MODE=offline to keep the "
                "run local (`wandb sync` uploads it later)"
            ) from None


class TensorBoardLogger(LightningTensorBoardLogger):
    """Lightning's TensorBoard logger (configs/logger/tensorboard.yaml), with its event file
    written out every `flush_secs` seconds, by its writer's own thread, and when training ends:
    Lightning's `save()` flushes it after each of its log calls, several times an epoch."""

    def __init__(self, flush_secs: float = 10, **options):
        super().__init__(flush_secs=flush_secs, **options)
        self.flush_secs = flush_secs
        self.next_save = 0.0  # the first also writes hparams.yaml

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """The numbers of one call as one event, a single record of the file: Lightning writes one
        for each, and the writer's thread checksums every record in pure Python, holding the GIL
        that training needs."""
        # Here: the writer has loaded it by now; at the top, runs that log to W&B alone would too.
        from tensorboard.compat.proto.summary_pb2 import Summary

        named = tensorboard_names(self, metrics)
        try:
            values = [
                Summary.Value(tag=key, simple_value=float(value)) for key, value in named.items()
            ]
        except (TypeError, ValueError):  # a dict of them (add_scalars), or what Lightning refuses
            super().log_metrics(metrics, step)
            return
        event_file_writer(self.experiment).add_summary(Summary(value=values), step)

    def save(self) -> None:
        if time.monotonic() >= self.next_save:
            self.next_save = time.monotonic() + self.flush_secs
            super().save()

    def finalize(self, status: str) -> None:
        self.next_save = 0.0  # Lightning's finalize saves once more, on success
        super().finalize(status)
