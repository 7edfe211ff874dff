"""Validation pictures of a regression: predicted against true values, and the residuals."""

import numpy as np
from matplotlib.figure import Figure
from torchmetrics import CatMetric

from .figures import ValidationPictures, plain


class RegressionPlots(ValidationPictures):
    """`val/predicted_vs_true` and `val/residuals` (and their PNG files in `dirpath`) for
    regressors (see ValidationPictures for when), in the target's own units: the predictions that
    `validation_step` returns, against the batch's targets turned back into those units."""

    task = "regression"

    def __init__(self, dirpath: str, min_interval_s: float = 30.0):
        super().__init__(dirpath, min_interval_s)
        self.predicted, self.true = CatMetric(), CatMetric()

    def reset(self, pl_module) -> None:
        self.predicted, self.true = (
            self.predicted.to(pl_module.device),
            self.true.to(pl_module.device),
        )
        self.predicted.reset()
        self.true.reset()

    def update(self, predicted, batch, pl_module) -> None:
        self.predicted.update(predicted)
        self.true.update(pl_module.to_units(batch[1]))

    def compute(self) -> tuple[np.ndarray, np.ndarray]:
        # Gathered from every DDP process.
        return self.predicted.compute().cpu().numpy(), self.true.compute().cpu().numpy()

    def draw(self, results, trainer) -> dict[str, Figure]:
        predicted, true = results
        target = trainer.datamodule.contract.target
        # e.g. "progression" or "price (USD)": what the axes measure.
        quantity = plain(target.name + (f" ({target.units})" if target.units else ""))
        return {
            "predicted_vs_true": scatter(
                true, predicted, f"true {quantity}", f"predicted {quantity}", diagonal=True
            ),
            "residuals": scatter(
                predicted,
                true - predicted,
                f"predicted {quantity}",
                f"true - predicted {quantity}",
            ),
        }


def scatter(x: np.ndarray, y: np.ndarray, xlabel: str, ylabel: str, diagonal=False) -> Figure:
    title = "predicted against true" if diagonal else "residuals against predictions"
    figure = Figure(figsize=(5, 5), dpi=100, layout="tight")
    axes = figure.subplots()
    axes.scatter(x, y, s=8, alpha=0.6)
    low, high = min(x.min(), y.min()), max(x.max(), y.max())
    if diagonal:  # where every point would lie if the predictions were exact
        axes.plot([low, high], [low, high], color="grey", linewidth=1)
    else:
        axes.axhline(0, color="grey", linewidth=1)
    axes.set(xlabel=xlabel, ylabel=ylabel, title=f"validation: {title}")
    axes.grid(alpha=0.3)
    return figure
