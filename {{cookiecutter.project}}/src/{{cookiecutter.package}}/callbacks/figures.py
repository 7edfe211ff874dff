"""Figures as images: saved as PNG and sent to every logger that takes images."""

import time
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.image import imsave
from pytorch_lightning.loggers import Logger, MLFlowLogger, TensorBoardLogger, WandbLogger

from ..files import staged
from ..options import check_seconds


def to_rgb(figure: Figure) -> np.ndarray:
    """The rendered figure as a height x width x 3 uint8 array."""
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


def plain(text) -> str:
    """`text` as Matplotlib is to write it, its dollar signs as such: two of them would make it
    a formula, which a class named "$5-$10" fails to draw as."""
    return str(text).replace("$", r"\$")


def save_png(image: np.ndarray, path: Path) -> None:
    with staged(path) as partial:
        imsave(partial, image)


def log_image(loggers: list[Logger], key: str, image: np.ndarray, step: int) -> None:
    """Sends `image` to each logger that takes images; loggers without images (CSV) skip it."""
    for logger in loggers:
        if isinstance(logger, TensorBoardLogger):
            logger.experiment.add_image(key, image, step, dataformats="HWC")
        elif isinstance(logger, WandbLogger):
            logger.log_image(key, [image], step=step)
        elif isinstance(logger, MLFlowLogger):
            logger.experiment.log_image(logger.run_id, image, key=key.replace("/", "_"), step=step)


class ValidationPictures(pl.Callback):
    """Pictures of the latest validation, for models of one `task`: each saved as
    `<dirpath>/<name>.png` and logged as `val/<name>` to every logger that takes images, at the
    end of a validation once `min_interval_s` seconds of training have passed since the last
    pictures, and at the end of training.

    Drawing takes longer than a whole epoch of the example model: a time budget, rather than a
    number of epochs, keeps its cost small for small and large models alike. Subclasses collect
    on the device (`reset`, `update`, `compute`, synchronized over DDP processes) and `draw`.
    """

    task = ""  # the `task` attribute of the models these pictures are for

    def __init__(self, dirpath: str, min_interval_s: float = 30.0):
        self.dirpath = Path(dirpath)
        setting = f"{type(self).__name__}'s min_interval_s"
        self.min_interval_s = check_seconds(min_interval_s, setting)
        self.active = False
        self.pending = None  # the latest validation's results, not drawn yet
        self.drawn_at = 0.0

    def reset(self, pl_module) -> None:
        raise NotImplementedError

    def update(self, outputs, batch, pl_module) -> None:
        raise NotImplementedError

    def compute(self):
        raise NotImplementedError

    def draw(self, results, trainer) -> dict[str, Figure]:
        raise NotImplementedError

    def setup(self, trainer, pl_module, stage):
        self.active = getattr(pl_module, "task", None) == self.task

    def on_train_start(self, trainer, pl_module):
        self.drawn_at = time.monotonic()

    def on_validation_epoch_start(self, trainer, pl_module):
        if self.active:
            self.reset(pl_module)

    def on_validation_batch_end(
        self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0
    ):
        if self.active and not trainer.sanity_checking:
            self.update(outputs, batch, pl_module)

    def on_validation_epoch_end(self, trainer, pl_module):
        if not self.active or trainer.sanity_checking:
            return
        self.pending = self.compute()
        if time.monotonic() - self.drawn_at >= self.min_interval_s:
            self._publish(trainer)

    def on_train_end(self, trainer, pl_module):
        if self.pending is not None:
            self._publish(trainer)

    def _publish(self, trainer) -> None:
        results, self.pending = self.pending, None
        if trainer.is_global_zero:
            for name, figure in self.draw(results, trainer).items():
                image = to_rgb(figure)
                save_png(image, self.dirpath / f"{name}.png")
                log_image(trainer.loggers, f"val/{name}", image, trainer.global_step)
        self.drawn_at = time.monotonic()
