"""What every datamodule holds: its data contract, its train/val/test splits, their loaders and
the shapes the networks are built for. A datamodule on this base says how to read its samples,
how to fit a contract on the training split and how to apply one."""

import gc
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities import rank_zero_only
from torch.utils.data import DataLoader, Dataset

from ..console import UserError, show
from ..contract import Contract, Input, Preprocessing, Target
from ..kinds import get as get_kind
from .loaders import make_loader

SPLITS = ("train", "val", "test")
ALL_SPLITS = "a dict of a dataset for each of train, val and test"
# The data config's keys that configs/model/ reads; null there means "from the data".
SHAPES = ("channels", "image_size", "num_features", "num_classes")


@contextmanager
def collection_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for a block that makes many objects that all live
    on (a folder's file names, their cached statistics): it would rescan them again and again
    as they are made: 60 % of the setup of a folder of 100,000 images. Cycles made meanwhile
    are collected once it is back on."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def class_name(folder: Path) -> str:
    """The class a folder of samples is named after. Answers, manifests and the page hold it as
    UTF-8 text: a name in another encoding reaches Python as escapes that UTF-8 cannot write."""
    try:
        folder.name.encode()
    except UnicodeEncodeError:
        spelled = str(os.fsencode(folder))[2:-1]  # its bytes, \xe9 for one that is not UTF-8
        raise UserError(
            f"class folder {spelled} is named in another encoding than UTF-8; rename it"
        ) from None
    return folder.name


@rank_zero_only  # once, not once per DDP process
def note(message: str) -> None:
    show(f"note: {message}")


class ContractDataModule(pl.LightningDataModule):
    """Splits, loaders and the contract of a dataset; a subclass says how to read it.

    `setup()` runs three steps: `read()` returns the samples in whatever form the subclass
    likes (calling `self.split(n)` for a random split of n samples, reproducible from
    `split_seed`); `fit(samples)` returns the contract, fitted on the training split only; and
    `apply(samples, contract)` returns `{"train": Dataset, "val": ..., "test": ...}` prepared
    as the contract says. Given a trained model's `contract`, fitting is skipped: eval and
    export prepare other data exactly as the model was trained on. `kind` names the input kind
    (a module of kinds/) whose functions fit and apply the preprocessing. Datasets that fetch
    whole batches in memory are `InMemoryDataset`s; any other dataset is fine too.
    """

    kind: str
    # Whether `fit` takes the settings of `given`, a pretrained network's own preprocessing
    # (builders.py sets it), instead of fitting them: datamodules that resize or tokenize files.
    adopts_preprocessing = False
    given: dict | None = None

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
        contract: dict | None = None,
    ):
        super().__init__()
        # The contract stays out of the hyperparameters: it is the checkpoint's own record.
        self.save_hyperparameters(logger=False, ignore=["contract"])
        self.trained = Contract.from_dict(contract, "the trained contract") if contract else None
        self.contract: Contract | None = None
        self.splits: dict[str, Dataset] = {}
        # Each split's positions among all samples, in the order its dataset holds them.
        self.indices: dict[str, np.ndarray] = {}

    def read(self) -> Any:
        raise NotImplementedError

    def fit(self, samples: Any) -> Contract:
        raise NotImplementedError

    def apply(self, samples: Any, contract: Contract) -> dict[str, Dataset]:
        raise NotImplementedError

    def setup(self, stage: str | None = None):
        # Runs on every process, and once: state assigned here exists in each DDP rank.
        if self.contract is None:
            with collection_paused():
                samples = self.read()
                self.check_kind()
                self.contract = self.trained or self.fit(samples)
                if not isinstance(self.contract, Contract):
                    expected = "the contract that self.declare(preprocessing, target) makes"
                    raise UserError(self.step_broken("fit", self.contract, expected))
                self.splits = self.apply(samples, self.contract)
                if not isinstance(self.splits, dict):
                    raise UserError(self.step_broken("apply", self.splits, ALL_SPLITS))
            self.check_shapes()

    def dataset(self, split: str) -> Dataset:
        """The split's dataset, as `apply` made it (a datamodule whose loaders open their splits
        themselves, as the stream's do, makes none)."""
        if split not in self.splits:
            raise UserError(self.step_broken("apply", self.splits, ALL_SPLITS))
        return self.splits[split]

    def step_broken(self, step: str, returned: Any, expected: str) -> str:
        """The line for a step of a datamodule of the user's own that returns what the base
        cannot use."""
        what = f"a dict of {', '.join(map(str, returned))}" if isinstance(returned, dict) else None
        what = what or ("None" if returned is None else f"a {type(returned).__name__}")
        return f"{type(self).__name__}.{step} returned {what}; it returns {expected}"

    def check_kind(self) -> None:
        """A datamodule names its input kind; a trained model's contract applies to data of that
        kind only (a stream knows its kind once read)."""
        if not isinstance(getattr(self, "kind", None), str):
            raise UserError(
                f"{type(self).__name__} names no input kind: set kind = 'image', 'table', 'text' "
                "or the name of a module of kinds/, as a class attribute"
            )
        if self.trained and self.trained.input.kind != self.kind:
            raise UserError(
                f"the model was trained on {self.trained.input.kind} inputs and this data config "
                f"reads {self.kind} inputs: pass a data config of its kind, or none for the data "
                "it was trained on"
            )

    def declare(self, preprocessing: Preprocessing, target: Target) -> Contract:
        """The contract of samples prepared by `preprocessing` (with the settings of `given` in
        place of fitted ones), of this datamodule's kind."""
        kind = get_kind(self.kind)
        if self.given:
            settings = preprocessing.to_dict() | self.given
            preprocessing = type(preprocessing).model_validate(settings)
        sample = Input(kind=self.kind, shape=kind.input_shape(preprocessing), dtype=kind.DTYPE)
        return Contract(input=sample, preprocessing=preprocessing, target=target)

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
        shape, target = self.contract.input.shape, self.contract.target
        image = len(shape) == 3  # channels, height, width
        return {
            "channels": shape[0] if image else None,
            "image_size": shape[-1] if image else None,
            "num_features": math.prod(shape),
            "num_classes": len(getattr(target, "class_names", None) or []) or None,
        }

    def check_shapes(self) -> None:
        for key, value in self.shapes.items():
            given = self.hparams.get(key)
            if None not in (given, value) and given != value:
                raise UserError(
                    f"data.{key}={given}, but the data has {value}: set data.{key}={value}, "
                    "or null to take it from the data"
                )

    def loader(self, split: str, as_evaluated: bool = False) -> DataLoader:
        """The split's loader; `as_evaluated`: in order and without augmentation, as evaluation
        prepares samples (export calibrates its INT8 model on training samples so)."""
        dataset = self.dataset(split)
        if as_evaluated and hasattr(dataset, "unaugmented"):
            dataset = dataset.unaugmented()
        return make_loader(
            dataset,
            self.hparams.batch_size,
            train=split == "train" and not as_evaluated,
            num_workers=self.hparams.num_workers,
            pin_memory=self.pins_memory(),
            persistent_workers=self.hparams.persistent_workers,
        )

    def pins_memory(self) -> bool:
        """data.pin_memory; null: when training on a CUDA device, the only one whose copies from
        the host pinned memory speeds up."""
        if self.hparams.pin_memory is not None:
            return self.hparams.pin_memory
        return self.trainer is not None and self.trainer.strategy.root_device.type == "cuda"

    def train_dataloader(self):
        # Overfitting memorizes the first batches: in order and unaugmented, rather than shuffled
        # for Lightning to replace with a warning.
        overfit = self.trainer is not None and self.trainer.overfit_batches > 0
        return self.loader("train", as_evaluated=overfit)

    def val_dataloader(self):
        return self.loader("val")

    def test_dataloader(self):
        return self.loader("test")

    def predict_dataloader(self):
        return self.loader("test")
