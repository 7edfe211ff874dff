"""Samplers that shard data across DDP ranks and keep runs reproducible when they resume."""

import os

import torch.distributed as dist
from torch.utils.data import Dataset, DistributedSampler


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


def training_sampler(dataset: Dataset) -> DistributedSampler:
    """Shuffles in an order that depends only on the seed and the epoch (Lightning calls
    `set_epoch`), not on the random state the run has reached: a resumed run sees the same order
    as one never interrupted. Under DDP each rank gets its shard, as Lightning would give it."""
    # PL_GLOBAL_SEED: set by seed_everything, and what Lightning's own DDP sampler uses.
    seed = int(os.environ.get("PL_GLOBAL_SEED", 0))
    if distributed():
        return DistributedSampler(dataset, shuffle=True, seed=seed)
    return DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=True, seed=seed)


def evaluation_sampler(dataset: Dataset) -> UnpaddedDistributedSampler | None:
    """The sampler for a validation, test or predict loader: None in a single process."""
    if distributed():
        return UnpaddedDistributedSampler(dataset)
    return None
