"""One loader for every split of every datamodule: samplers that shard data across DDP ranks and
keep resumed runs reproducible, seeded iterators, worker processes, and the collate that fits
the dataset."""

import os

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from ..console import UserError, counted


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


class UnpaddedDistributedSampler(DistributedSampler):
    """Rank r gets samples r, r + world_size, ... of the dataset, in order.

    DistributedSampler pads the dataset with repeated samples until every rank has as many,
    and validation and test metrics would count those twice. Here ranks may differ by one
    sample, which is fine outside training: evaluation runs no collective per step.
    """

    def __init__(self, dataset: Dataset):
        super().__init__(dataset, shuffle=False)
        self.num_samples = len(range(self.rank, len(dataset), self.num_replicas))
        self.total_size = len(dataset)


def distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def run_seed() -> int:
    """The run's seed, which training data is shuffled from: PL_GLOBAL_SEED, set by
    seed_everything, and what Lightning's own DDP sampler uses."""
    return int(os.environ.get("PL_GLOBAL_SEED", 0))


def training_sampler(dataset: Dataset) -> DistributedSampler:
    """Shuffles in an order that depends only on the seed and the epoch (Lightning calls
    `set_epoch`), not on the random state the run has reached: a resumed run sees the same order
    as one never interrupted. Under DDP each rank gets its shard, as Lightning would give it."""
    seed = run_seed()
    if distributed():
        return DistributedSampler(dataset, shuffle=True, seed=seed)
    return DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=True, seed=seed)


def evaluation_sampler(dataset: Dataset) -> UnpaddedDistributedSampler | None:
    """The sampler for a validation, test or predict loader: None in a single process. Each
    rank needs a sample: Lightning refuses a loader that is empty on one, in a traceback."""
    if distributed():
        ranks, samples = dist.get_world_size(), len(dataset)  # type: ignore[arg-type]
        if samples < ranks:
            raise UserError(
                f"a split of {counted(samples, 'sample')} to evaluate leaves some of the "
                f"{ranks} processes none: add samples, raise data.val_fraction and "
                "data.test_fraction, or train on fewer trainer.devices"
            )
        return UnpaddedDistributedSampler(dataset)
    return None


def make_loader(
    dataset: Dataset,
    batch_size: int,
    train: bool,
    num_workers: int,
    pin_memory: bool,
    persistent_workers: bool,
) -> DataLoader:
    """A shuffled, sharded training loader or an in-order evaluation loader of `dataset`."""
    if num_workers > 0:
        # Workers hand batches over through named shared memory rather than by passing a file
        # descriptor per tensor, a round trip to the worker each: a third less waiting per batch
        # (benchmarks/README.md), and no "too many open files" with many workers. PyTorch's
        # torch_shm_manager removes what a killed process leaves behind.
        torch.multiprocessing.set_sharing_strategy("file_system")
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=training_sampler(dataset) if train else evaluation_sampler(dataset),
        # Iterators draw their seed from this generator rather than from the global one that
        # dropout uses: a resumed run creates its first iterator at another moment.
        generator=torch.Generator().manual_seed(torch.initial_seed()),
        # Batches that an InMemoryDataset assembled pass through; samples are collated.
        collate_fn=keep_batch if isinstance(dataset, InMemoryDataset) else None,
        num_workers=num_workers,
        pin_memory=pin_memory,
        persistent_workers=persistent_workers and num_workers > 0,
    )
