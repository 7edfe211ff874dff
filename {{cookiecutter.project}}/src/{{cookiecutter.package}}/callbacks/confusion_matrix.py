"""The validation confusion matrix as a picture: which digits the model mixes up."""

import time
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
from matplotlib.figure import Figure
from torchmetrics.classification import MulticlassConfusionMatrix

from .figures import log_image, save_png, to_rgb


class ConfusionMatrixImage(pl.Callback):
    """Logs `val/confusion_matrix` to every logger that takes images and saves it as
    `<dirpath>/confusion_matrix.png`: at the end of a validation once `min_interval_s` seconds
    of training have passed since the last picture, and at the end of training.

    The matrix is counted on the device from the logits `validation_step` returns. Drawing it
    takes longer than a whole epoch of the example model: a time budget, rather than a number of
    epochs, keeps its cost small for small and large models alike.
    """

    def __init__(self, dirpath: str, min_interval_s: float = 30.0):
        self.dirpath = Path(dirpath)
        self.min_interval_s = min_interval_s
        self.matrix = None
        self.pending = None  # the latest matrix not drawn yet
        self.drawn_at = 0.0

    def setup(self, trainer, pl_module, stage):
        # The model's number of classes, which the data decided after this callback was built.
        classes = pl_module.hparams.num_classes
        self.matrix = MulticlassConfusionMatrix(classes, validate_args=False)

    def on_train_start(self, trainer, pl_module):
        self.drawn_at = time.monotonic()

    def on_validation_epoch_start(self, trainer, pl_module):
        self.matrix = self.matrix.to(pl_module.device)
        self.matrix.reset()

    def on_validation_batch_end(
        self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0
    ):
        if not trainer.sanity_checking:
            self.matrix.update(outputs.argmax(dim=-1), batch[1])

    def on_validation_epoch_end(self, trainer, pl_module):
        if trainer.sanity_checking:
            return
        self.pending = self.matrix.compute().cpu().numpy()  # summed over DDP processes
        if time.monotonic() - self.drawn_at >= self.min_interval_s:
            self._publish(trainer)

    def on_train_end(self, trainer, pl_module):
        if self.pending is not None:
            self._publish(trainer)

    def _publish(self, trainer) -> None:
        matrix, self.pending = self.pending, None
        if trainer.is_global_zero:
            names = getattr(trainer.datamodule, "class_names", None) or list(range(len(matrix)))
            image = to_rgb(draw(matrix, names))
            save_png(image, self.dirpath / "confusion_matrix.png")
            log_image(trainer.loggers, "val/confusion_matrix", image, trainer.global_step)
        self.drawn_at = time.monotonic()


def draw(matrix: np.ndarray, class_names: list) -> Figure:
    """Rows are true classes, columns predictions; non-zero counts are written in when they fit."""
    figure = Figure(figsize=(5, 5), dpi=100, layout="tight")
    axes = figure.subplots()
    axes.imshow(matrix, cmap="Blues")
    ticks = range(len(class_names))
    axes.set(xticks=ticks, yticks=ticks, xticklabels=class_names, yticklabels=class_names)
    axes.set(xlabel="predicted", ylabel="true", title="validation confusion matrix")
    if len(class_names) <= 20:
        dark = matrix.max() / 2
        for row, col in np.argwhere(matrix):
            count = matrix[row, col]
            color = "white" if count > dark else "black"
            axes.text(col, row, count, ha="center", va="center", color=color, fontsize=8)
    return figure
