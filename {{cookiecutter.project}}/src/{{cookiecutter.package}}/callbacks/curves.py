"""Learning curves as PNG files in the run directory, readable without any logger's UI."""

from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

import pytorch_lightning as pl
import torch
from matplotlib.figure import Figure

from ..records import is_logging_step
from .figures import plain, save_png, to_rgb

# Recorded at each logging step; every other metric once per epoch.
PER_STEP = ("train/loss", "lr")


class PlotCurves(pl.Callback):
    """When training ends, writes `loss.png`, `accuracy.png` and `lr.png` to `dirpath`.

    Keeps the values logged during the run: the training loss and learning rate at each
    logging step, and every epoch-level `*loss` and `*acc*` metric after each epoch. They are
    saved in checkpoints, so that a resumed run draws its curves from the start.
    """

    def __init__(self, dirpath: str):
        self.dirpath = Path(dirpath)
        self.history: dict[str, list[tuple[int, float | torch.Tensor]]] = defaultdict(list)
        self.epoch_ended = False

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step
        if not is_logging_step(trainer, step):
            return
        # None where training_step returned None (a module of the user's own skipping a batch).
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if loss is not None:  # kept on the device: reading it now would make the host wait
            self.history["train/loss"].append((step, loss.detach()))
        self.history["lr"].append((step, trainer.optimizers[0].param_groups[0]["lr"]))

    def on_train_epoch_end(self, trainer, pl_module):
        # Lightning reduces what the epoch logged (train/acc) after every epoch-end hook: the
        # epoch's values are read once the next epoch starts, or training ends.
        self.epoch_ended = True

    def on_train_epoch_start(self, trainer, pl_module):
        self.record_epoch(trainer)

    def record_epoch(self, trainer) -> None:
        if not self.epoch_ended:
            return
        self.epoch_ended = False
        for name, value in trainer.callback_metrics.items():
            per_epoch = not name.endswith("_step") and name not in PER_STEP
            if per_epoch and ("loss" in name or "acc" in name):
                self.history[name.removesuffix("_epoch")].append(
                    (trainer.global_step, float(value))
                )

    def state_dict(self) -> dict:
        return {
            "history": {
                name: [[step, float(value)] for step, value in points]
                for name, points in self.history.items()
            }
        }

    def load_state_dict(self, state_dict: dict) -> None:
        for name, points in state_dict["history"].items():
            self.history[name] = [(step, value) for step, value in points]

    def on_train_end(self, trainer, pl_module):
        self.record_epoch(trainer)
        if trainer.is_global_zero:
            self.draw_all()

    def draw_all(self) -> None:
        panels = {"loss": "loss", "accuracy": "acc", "lr": "lr"}
        for filename, part in panels.items():
            curves = {name: points for name, points in self.history.items() if part in name}
            if curves:
                save_png(to_rgb(draw(curves, filename)), self.dirpath / f"{filename}.png")


def draw(curves: dict[str, list], title: str) -> Figure:
    figure = Figure(figsize=(6, 4), dpi=100, layout="tight")
    axes = figure.subplots()
    for name, points in curves.items():
        steps, values = zip(*points, strict=True)
        axes.plot(
            steps,
            [float(value) for value in values],
            marker="." if len(steps) < 50 else None,
            label=plain(name),  # a module may log any name
        )
    axes.set(xlabel="step", title=title)
    axes.grid(alpha=0.3)
    axes.legend()
    return figure
