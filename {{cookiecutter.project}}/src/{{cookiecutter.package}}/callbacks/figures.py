"""Figures as images: saved as PNG and sent to every logger that takes images."""

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.image import imsave
from pytorch_lightning.loggers import Logger, MLFlowLogger, TensorBoardLogger, WandbLogger

from ..files import staged


def to_rgb(figure: Figure) -> np.ndarray:
    """The rendered figure as a height x width x 3 uint8 array."""
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


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
