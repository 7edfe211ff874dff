"""The scikit-learn digits: 1,797 8x8 images of handwritten digits that ship with scikit-learn."""

import pytorch_lightning as pl
import torch
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, Dataset

from ..console import UserError
from .samplers import evaluation_sampler, training_sampler


class InMemoryDataset(Dataset):
    """Tensors held in memory, fetched a whole batch at a time.

    DataLoader calls `__getitems__` with the batch's indices, so a batch costs one indexing
    operation instead of one Python call per sample plus a collate. Samplers still work as
    usual, DistributedSampler under DDP included.
    """

    def __init__(self, inputs: torch.Tensor, targets: torch.Tensor):
        self.inputs, self.targets = inputs, targets

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index):
        return self.inputs[index], self.targets[index]

    def __getitems__(self, indices: list[int]):
        index = torch.as_tensor(indices)
        return self.inputs[index], self.targets[index]


def keep_batch(batch):
    """`collate_fn` for batches that `__getitems__` already assembled."""
    return batch


class DigitsDataModule(pl.LightningDataModule):
    """Train/val/test splits of the digits, normalized with statistics of the train split."""

    class_names = [str(digit) for digit in range(10)]
    input_shape = (1, 8, 8)

    def __init__(
        self,
        channels: int = 1,
        image_size: int = 8,
        num_features: int = 64,
        num_classes: int = 10,
        batch_size: int = 64,
        val_fraction: float = 0.15,
        test_fraction: float = 0.15,
        split_seed: int = 42,
        num_workers: int = 0,
        pin_memory: bool = False,
        persistent_workers: bool = False,
    ):
        super().__init__()
        if (channels, image_size, num_features, num_classes) != (1, 8, 64, 10):
            raise UserError(
                "the digits are 8x8 greyscale images of 10 classes: keep data.channels=1, "
                "data.image_size=8, data.num_features=64 and data.num_classes=10"
            )
        self.save_hyperparameters(logger=False)
        self.splits: dict[str, InMemoryDataset] = {}
        self.mean = self.std = None

    def prepare_data(self):
        # Runs on one process per node. Nothing to download: this only fails early if the
        # data that ships with scikit-learn is missing.
        load_digits()

    def setup(self, stage: str | None = None):
        # Runs on every process: state assigned here exists in each DDP rank.
        if self.splits:
            return
        digits = load_digits()
        images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1)
        labels = torch.tensor(digits.target, dtype=torch.long)
        order = torch.randperm(
            len(labels), generator=torch.Generator().manual_seed(self.hparams.split_seed)
        )
        n_val = round(len(labels) * self.hparams.val_fraction)
        n_test = round(len(labels) * self.hparams.test_fraction)
        parts = torch.split(order, [len(labels) - n_val - n_test, n_val, n_test])
        train = images[parts[0]]
        self.mean, self.std = train.mean().item(), train.std().item()
        for name, index in zip(("train", "val", "test"), parts, strict=True):
            normalized = (images[index] - self.mean) / self.std
            self.splits[name] = InMemoryDataset(normalized, labels[index])

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        workers = self.hparams.num_workers
        dataset = self.splits[split]
        return DataLoader(
            dataset,
            batch_size=self.hparams.batch_size,
            sampler=training_sampler(dataset) if shuffle else evaluation_sampler(dataset),
            # Iterators draw their seed from this generator rather than from the global one that
            # dropout uses: a resumed run creates its first iterator at another moment.
            generator=torch.Generator().manual_seed(torch.initial_seed()),
            collate_fn=keep_batch,
            num_workers=workers,
            pin_memory=self.hparams.pin_memory,
            persistent_workers=self.hparams.persistent_workers and workers > 0,
        )

    def train_dataloader(self):
        return self._loader("train", shuffle=True)

    def val_dataloader(self):
        return self._loader("val", shuffle=False)

    def test_dataloader(self):
        return self._loader("test", shuffle=False)

    def predict_dataloader(self):
        return self._loader("test", shuffle=False)
