"""The scikit-learn digits: 1,797 8x8 images of handwritten digits that ship with scikit-learn."""

import numpy as np
import pandas as pd
import torch
from sklearn.datasets import load_digits

from ..preprocess import (
    classification_target,
    encode_target,
    image_contract,
    normalization,
    normalize,
    pixel_moments,
    regression_target,
)
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

    def read(self):
        digits = load_digits()
        images = digits.images.astype(np.float32)[:, None]
        indices = self.split(len(images))
        stats = self.fitted(
            "preprocessing", lambda: normalization(pixel_moments(images[indices["train"]]))
        )
        values = pd.Series(digits.target)
        target = self.fitted("target", lambda: self.fit_target(values.iloc[indices["train"]]))
        labels = torch.tensor(encode_target(values, target))  # a copy: pandas may share its memory
        contract = image_contract(1, 8, [0, 16], stats, target)
        inputs = torch.from_numpy(normalize(images, contract["preprocessing"]))
        splits = {
            name: InMemoryDataset(inputs[index], labels[index]) for name, index in indices.items()
        }
        return splits, contract

    def fit_target(self, train: pd.Series) -> dict:
        """The ten digits as classes, or (regression) the digit's value as a number."""
        if self.hparams.task == "regression":
            return regression_target(train, "digit", None, None)
        return classification_target([str(digit) for digit in range(10)])
