"""The validation confusion matrix as a picture: which digits the model mixes up."""

from pathlib import Path

import numpy as np
import pytorch_lightning as pl
from matplotlib.figure import Figure
from pytorch_lightning.utilities import rank_zero_only
from torchmetrics.classification import MulticlassConfusionMatrix

from ..utils.images import log_image, save_png, to_rgb


class ConfusionMatrixImage(pl.Callback):
    """At the end of each validation, logs `val/confusion_matrix` to every logger that takes
    images and saves the latest as `<dirpath>/confusion_matrix.png`.

    The model is run once more on each validation batch, under the trainer's precision (AMP
    included), so any classifier works unchanged.
    """

    def __init__(self, dirpath: str, num_classes: int):
        self.dirpath = Path(dirpath)
        self.matrix = MulticlassConfusionMatrix(num_classes)

    def on_validation_epoch_start(self, trainer, pl_module):
        self.matrix = self.matrix.to(pl_module.device)
        self.matrix.reset()

    def on_validation_batch_end(
        self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0
    ):
        if trainer.sanity_checking:
            return
        x, y = batch
        with trainer.precision_plugin.forward_context():
            self.matrix.update(pl_module(x).argmax(dim=-1), y)

    def on_validation_epoch_end(self, trainer, pl_module):
        if trainer.sanity_checking:
            return
        matrix = self.matrix.compute().cpu().numpy()  # summed over DDP processes: call on all
        names = getattr(trainer.datamodule, "class_names", None) or list(range(len(matrix)))
        self._publish(trainer, draw(matrix, names))

    @rank_zero_only
    def _publish(self, trainer, figure: Figure) -> None:
        image = to_rgb(figure)
        save_png(image, self.dirpath / "confusion_matrix.png")
        log_image(trainer.loggers, "val/confusion_matrix", image, trainer.global_step)


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
