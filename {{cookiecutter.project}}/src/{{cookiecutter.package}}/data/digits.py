"""The scikit-learn digits: 1,797 8x8 images of handwritten digits that ship with scikit-learn."""

import numpy as np
import pandas as pd
import torch
from sklearn.datasets import load_digits

from .. import targets
from ..console import UserError
from ..contract import Contract
from ..kinds import image
from ..targets import classification, regression
from .base import ContractDataModule
from .loaders import InMemoryDataset


class DigitsDataModule(ContractDataModule):
    """Train/val/test splits of the digits (raw values 0..16), normalized with statistics of the
    train split. Held in memory; batches are sliced, not collated."""

    kind = "image"

    def __init__(self, task: str = "classification", **common):
        super().__init__(**common)

    def prepare_data(self):
        # Runs on one process per node. Nothing to download: this only fails early if the
        # data that ships with scikit-learn is missing.
        load_digits()

    def read(self) -> tuple[np.ndarray, pd.Series]:
        digits = load_digits()
        self.split(len(digits.images))
        return digits.images.astype(np.float32)[:, None], pd.Series(digits.target)

    def fit(self, samples: tuple[np.ndarray, pd.Series]) -> Contract:
        """Per-channel statistics of the training images; the ten digits as classes, or
        (regression) the digit's value as a number."""
        images, values = samples
        train = self.indices["train"]
        preprocessing = image.fit(image.pixel_moments(images[train]), 1, 8, [0, 16])
        if self.hparams.task == "regression":
            target = regression.fit(values.iloc[train], "digit", None)
        else:
            target = classification.fit([str(digit) for digit in range(10)])
        return self.declare(preprocessing, target)

    def apply(self, samples: tuple[np.ndarray, pd.Series], contract: Contract) -> dict:
        images, values = samples
        if contract.input.shape != list(images.shape[1:]):  # a trained model of other images
            takes = " x ".join(map(str, contract.input.shape))
            raise UserError(
                f"the digits are 1 x 8 x 8 images and the model takes {takes}: evaluate it on "
                "data like its training data"
            )
        inputs = torch.from_numpy(image.normalize(images, contract.preprocessing))
        # A copy: pandas may share its memory, which torch would warn about.
        labels = torch.tensor(targets.get(contract.target.task).encode(values, contract.target))
        return {
            name: InMemoryDataset(inputs[index], labels[index])
            for name, index in self.indices.items()
        }
