"""Lightning's rich progress bar, without a host-device sync every step."""

from pytorch_lightning.callbacks import RichProgressBar

from ..records import is_logging_step


class ProgressBar(RichProgressBar):
    """Lightning's `RichProgressBar` reads the logged metrics after every training batch, and on a
    GPU each read makes the host wait for the device. This one reads them at logging steps only,
    when new values arrive, and shows the last ones read in between."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._shown: dict | None = None
        self._reuse = False

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self._reuse = self._shown is not None and not is_logging_step(trainer, trainer.global_step)
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        self._reuse = False

    def get_metrics(self, trainer, pl_module) -> dict:
        if not self._reuse:
            self._shown = super().get_metrics(trainer, pl_module)
        return self._shown
