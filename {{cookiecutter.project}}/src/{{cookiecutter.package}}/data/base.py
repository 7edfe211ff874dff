"""What every datamodule holds: its data contract, its train/val/test splits, their loaders and
the shapes the networks are built for. A datamodule on this base writes only `read()`."""

import math
from collections.abc import Callable

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset

from ..console import UserError
from .loaders import make_loader

SPLITS = ("train", "val", "test")
# The data config's keys that configs/model/ reads; null there means "from the data".
SHAPES = ("channels", "image_size", "num_features", "num_classes")


class ContractDataModule(pl.LightningDataModule):
    """Splits, loaders and the contract of a dataset; a subclass says how to read it.

    `read()` returns `({"train": Dataset, "val": ..., "test": ...}, contract)`, with the contract
    built by the functions of `preprocess.py` from the training split only. It calls
    `self.split(n)` for a random split of n samples, reproducible from `split_seed`. Datasets
    that fetch whole batches in memory are `InMemoryDataset`s; any other dataset is fine too.
    """

    def __init__(
        self,
        batch_size: int = 64,
        val_fraction: float = 0.15,
        test_fraction: float = 0.15,
        split_seed: int = 42,
        num_workers: int = 0,
        pin_memory: bool | None = None,
        persistent_workers: bool = False,
        channels: int | None = None,
        image_size: int | None = None,
        num_features: int | None = None,
        num_classes: int | None = None,
    ):
        super().__init__()
        self.save_hyperparameters(logger=False)
        self.contract: dict | None = None
        # The contract of a trained model, to evaluate it on other data: see `fitted`.
        self.trained_contract: dict | None = None
        self.splits: dict[str, Dataset] = {}
        # Each split's positions among all samples, in the order its dataset holds them.
        self.indices: dict[str, np.ndarray] = {}

    def read(self) -> tuple[dict[str, Dataset], dict]:
        raise NotImplementedError

    def setup(self, stage: str | None = None):
        # Runs on every process, and once: state assigned here exists in each DDP rank.
        if self.contract is None:
            self.splits, self.contract = self.read()
            self.check_shapes()

    def fitted(self, part: str, fit: Callable[[], dict]) -> dict:
        """The contract's `part` ("preprocessing" or "target"): fitted now on the training split,
        or the trained model's, which must prepare other data exactly as it was trained on."""
        return self.trained_contract[part] if self.trained_contract else fit()

    def split(self, count: int) -> dict[str, np.ndarray]:
        """Random positions of the train, val and test samples among `count`."""
        generator = torch.Generator().manual_seed(self.hparams.split_seed)
        order = torch.randperm(count, generator=generator).numpy()
        n_val = round(count * self.hparams.val_fraction)
        n_test = round(count * self.hparams.test_fraction)
        if min(n_val, n_test, count - n_val - n_test) < 1:
            raise UserError(
                f"{count} samples leave a split empty with data.val_fraction="
                f"{self.hparams.val_fraction} and data.test_fraction="
                f"{self.hparams.test_fraction}; add samples or change the fractions"
            )
        parts = np.split(order, [count - n_val - n_test, count - n_test])
        self.indices = dict(zip(SPLITS, parts, strict=True))
        return self.indices

    @property
    def shapes(self) -> dict[str, int | None]:
        """What the networks are built for, from the contract; None where it does not apply."""
        spec, target = self.contract["input"], self.contract["target"]
        image = spec["kind"] == "image"
        classes = target.get("class_names")
        return {
            "channels": spec["shape"][0] if image else None,
            "image_size": spec["shape"][-1] if image else None,
            "num_features": math.prod(spec["shape"]),
            "num_classes": len(classes) if classes else None,
        }

    def check_shapes(self) -> None:
        for key, value in self.shapes.items():
            given = self.hparams.get(key)
            if None not in (given, value) and given != value:
                raise UserError(
                    f"data.{key}={given}, but the data has {value}: set data.{key}={value}, "
                    "or null to take it from the data"
                )

    @property
    def class_names(self) -> list[str] | None:
        return self.contract["target"].get("class_names") if self.contract else None

    def loader(self, split: str, as_evaluated: bool = False) -> DataLoader:
        """The split's loader; `as_evaluated`: in order and without augmentation, as evaluation
        prepares samples (export calibrates its INT8 model on training samples so)."""
        dataset = self.splits[split]
        if as_evaluated and hasattr(dataset, "unaugmented"):
            dataset = dataset.unaugmented()
        pin_memory = self.hparams.pin_memory
        if pin_memory is None:  # pinned host memory only speeds up copies to a CUDA device
            pin_memory = (
                self.trainer is not None and self.trainer.strategy.root_device.type == "cuda"
            )
        return make_loader(
            dataset,
            self.hparams.batch_size,
            train=split == "train" and not as_evaluated,
            num_workers=self.hparams.num_workers,
            pin_memory=pin_memory,
            persistent_workers=self.hparams.persistent_workers,
        )

    def train_dataloader(self):
        return self.loader("train")

    def val_dataloader(self):
        return self.loader("val")

    def test_dataloader(self):
        return self.loader("test")

    def predict_dataloader(self):
        return self.loader("test")
