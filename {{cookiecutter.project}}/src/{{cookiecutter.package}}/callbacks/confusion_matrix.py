"""The validation confusion matrix as a picture: which classes the model mixes up."""

import numpy as np
from matplotlib.figure import Figure
from torchmetrics.classification import MulticlassConfusionMatrix

from .figures import ValidationPictures, plain

# Ticks name the classes where the names can be read; beyond, the axes count the classes (and a
# thousand names would take seconds to lay out at every drawing).
MOST_NAMED = 40


class ConfusionMatrixImage(ValidationPictures):
    """`val/confusion_matrix` and `<dirpath>/confusion_matrix.png` for classifiers (see
    ValidationPictures for when), counted on the device from the logits `validation_step`
    returns."""

    task = "classification"
    matrix = None

    def reset(self, pl_module) -> None:
        if self.matrix is not None:
            self.matrix.reset()

    def update(self, logits, batch, pl_module) -> None:
        if self.matrix is None:  # sized by the model's outputs at its first batch
            self.matrix = MulticlassConfusionMatrix(logits.shape[-1], validate_args=False)
            self.matrix = self.matrix.to(pl_module.device)
        self.matrix.update(logits.argmax(dim=-1), batch[1])

    def compute(self) -> np.ndarray:
        return self.matrix.compute().cpu().numpy()  # summed over DDP processes

    def draw(self, matrix: np.ndarray, trainer) -> dict[str, Figure]:
        contract = getattr(trainer.datamodule, "contract", None)
        names = getattr(contract and contract.target, "class_names", None)
        return {"confusion_matrix": draw(matrix, names or list(range(len(matrix))))}


def draw(matrix: np.ndarray, class_names: list) -> Figure:
    """Rows are true classes, columns predictions; non-zero counts are written in when they fit."""
    figure = Figure(figsize=(5, 5), dpi=100, layout="tight")
    axes = figure.subplots()
    axes.imshow(matrix, cmap="Blues")
    if len(class_names) <= MOST_NAMED:
        ticks, names = range(len(class_names)), [plain(name) for name in class_names]
        axes.set(xticks=ticks, yticks=ticks, xticklabels=names, yticklabels=names)
    axes.set(xlabel="predicted", ylabel="true", title="validation confusion matrix")
    if len(class_names) <= 20:
        dark = matrix.max() / 2
        for row, col in np.argwhere(matrix):
            count = matrix[row, col]
            color = "white" if count > dark else "black"
            axes.text(col, row, count, ha="center", va="center", color=color, fontsize=8)
    return figure
