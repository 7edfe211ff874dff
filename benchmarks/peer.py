"""The peer template's side of startup.py: ashleve/lightning-hydra-template on the project's
example data, the digits that ship with scikit-learn, split and batched as `data=digits` splits
and batches them, and a callback that records when the peer's run reaches its first training
step. Imported only inside the peer's runs, which have its `lightning` package.
"""

import json
import time

import lightning as L
import numpy as np
import torch
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset


class DigitsDataModule(L.LightningDataModule):
    """The digits as tensors (0..16 scaled to 0..1), 70 / 15 / 15 % from a fixed seed."""

    def __init__(self, batch_size: int = 64, seed: int = 42):
        super().__init__()
        self.batch_size, self.seed = batch_size, seed

    def setup(self, stage: str | None = None) -> None:
        digits = load_digits()
        inputs = torch.tensor(digits.images[:, None] / 16, dtype=torch.float32)
        labels = torch.tensor(digits.target)
        order = np.random.default_rng(self.seed).permutation(len(labels))
        held = int(0.15 * len(labels))
        parts = {"test": order[:held], "val": order[held : 2 * held], "train": order[2 * held :]}
        self.splits = {name: TensorDataset(inputs[i], labels[i]) for name, i in parts.items()}

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.splits["train"], batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.splits["val"], batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.splits["test"], batch_size=self.batch_size)


class FirstStep(L.Callback):
    """Writes to `path` when fitting started and when the first training step began (Unix
    time), as probes.EpochTimer does in the project's runs."""

    def __init__(self, path: str):
        self.path, self.times = path, {}

    def on_fit_start(self, trainer, pl_module) -> None:
        self.times["fit_start"] = time.time()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if "first_step" not in self.times:
            self.times["first_step"] = time.time()
            with open(self.path, "w") as file:
                json.dump(self.times, file)
