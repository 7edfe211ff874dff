"""Samples that optimize.py wrote as LitData chunks, streamed from a folder or object storage:
`python train.py data=stream data.input_dir=<folder or s3://bucket/prefix>`.

A stream holds one folder of chunks per split (train/, val/, test/) and `contract.json`, the
contract fitted on the training split and written last: a stream without it was never finished.
Its samples are stored as evaluation prepares them (resized, normalized, encoded), so training
reads them without decoding anything; images are not augmented.
"""

import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import torch
import torch.distributed as dist

from ..console import UserError
from ..contract import Contract
from ..files import save_text
from ..options import StreamSettings, validated
from ..upstream import allow_plain_http_object_storage
from .base import SPLITS, ContractDataModule
from .loaders import distributed, run_seed

try:
    from litdata import StreamingDataLoader, StreamingDataset
except ModuleNotFoundError as error:  # an optional extra
    if error.name != "litdata":
        raise
    raise UserError(
        'data=stream and optimize.py need litdata: pip install -e ".[stream]"'
    ) from None

CONTRACT_FILE = "contract.json"
# A URL's scheme and the colon and slash after it; a drive letter (C:/) is no scheme.
URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+:/")
# LitData logs at INFO how it reads and caches every split each time a loader starts; its
# warnings stay.
logging.getLogger("litdata").setLevel(logging.WARNING)


def location(folder: str, name: str) -> str:
    """`name` inside a local folder or an object storage prefix (s3://bucket/prefix)."""
    return f"{str(folder).rstrip('/')}/{name}"


def is_remote(folder: str) -> bool:
    """Whether `folder` is in object storage. What starts as a URL does (`gs://...` is refused
    there), and so does `s3:/bucket/...`, which is refused: as a local path it would make a
    folder named `s3:`."""
    if URL.match(str(folder)) and "://" not in str(folder):
        raise UserError(f"{folder}: streams live in a local folder or at s3://bucket/prefix")
    return "://" in str(folder)


@contextmanager
def s3_object(url: str) -> Iterator[tuple]:
    """The S3 client (credentials and endpoint from the usual AWS_* variables), bucket and key
    of `url`; what the storage refuses is one line."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    parts = urlparse(url)
    if parts.scheme != "s3":
        raise UserError(f"{url}: streams live in a local folder or at s3://bucket/prefix")
    try:
        yield boto3.client("s3"), parts.netloc, parts.path.lstrip("/")
    except (BotoCoreError, ClientError) as error:
        raise UserError(
            f"{url}: {error}; check the bucket, the credentials and AWS_ENDPOINT_URL"
        ) from None


def read_text(url: str) -> str | None:
    """A small file of a local folder or of object storage; None if there is none."""
    if not is_remote(url):
        path = Path(url)
        return path.read_text() if path.is_file() else None
    with s3_object(url) as (client, bucket, key):
        try:
            return client.get_object(Bucket=bucket, Key=key)["Body"].read().decode()
        except client.exceptions.NoSuchKey:
            return None


def write_text(url: str, text: str) -> None:
    if not is_remote(url):
        save_text(url, text)
        return
    with s3_object(url) as (client, bucket, key):
        client.put_object(Bucket=bucket, Key=key, Body=text.encode())


def unfinished(folder: str) -> bool:
    """Whether `folder` holds chunks of a split but no contract: optimize.py stopped in it. (An
    image folder may have train/, val/ and test/ too, of images.)"""
    if read_text(location(folder, CONTRACT_FILE)) is not None:
        return False
    if is_remote(folder):
        return any(holds_files(location(folder, split)) for split in SPLITS)
    return any(next(Path(folder, split).glob("chunk-*.bin"), None) for split in SPLITS)


def holds_files(folder: str) -> bool:
    if not is_remote(folder):
        path = Path(folder)
        return path.exists() and (not path.is_dir() or any(path.iterdir()))
    with s3_object(location(folder, "")) as (client, bucket, prefix):
        return client.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1)["KeyCount"] > 0


class ChunkSample:
    """What optimize.py writes of sample `index` of a split's dataset: its input and target as
    numpy arrays. A class, not a closure: LitData's worker processes unpickle it."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __call__(self, index: int) -> dict:
        inputs, target = self.dataset[index]
        return {"input": np.asarray(inputs), "target": np.asarray(target)}


def as_pair(sample: dict) -> tuple:
    """A stored sample as the models take it: (input, target)."""
    return sample["input"], sample["target"]


class StreamLoader(StreamingDataLoader):
    """A StreamingDataLoader whose epoch after a resumed one starts afresh. LitData's loader,
    given a checkpoint's state, resumes until an iterator has run to its end; Lightning ends an
    epoch after its number of batches without drawing that end, so every later epoch would
    resume the checkpoint's position again. Relies on: the loader's `restore` flag (0.2.76)."""

    resumed = False

    def __iter__(self):
        if self.resumed:  # the resumed epoch has begun: the next iterator starts a new one
            self.restore = False
        self.resumed = self.restore
        return super().__iter__()


class StreamDataModule(ContractDataModule):
    """The splits that optimize.py wrote, read with `litdata.StreamingDataset`: the training
    split shuffled per epoch from the run's seed and sharded across DDP ranks and nodes, each
    sample once an epoch; chunks of object storage kept in `cache_dir`, at most
    `max_cache_size`. Its loaders save their position in checkpoints: a resumed run goes on
    from the sample it reached."""

    kind = "stream"  # until read: the stream's contract names the kind of its samples

    def __init__(
        self,
        input_dir: str | None = None,
        cache_dir: str | None = None,
        max_cache_size: str = "50GB",
        # A stream of texts: its tokenizer's size and its texts' length, which training records
        # (see shapes).
        vocab_size: int | None = None,
        max_length: int | None = None,
        **common,
    ):
        validated(StreamSettings, {"max_cache_size": max_cache_size}, prefix="data.")
        super().__init__(**common)

    def read(self) -> Contract:
        folder = self.hparams.input_dir
        if not folder:
            raise UserError(
                "data=stream needs data.input_dir=<folder or s3://bucket/prefix> that "
                "optimize.py wrote"
            )
        text = read_text(location(folder, CONTRACT_FILE))
        if text is None:
            parent, _, name = str(folder).rstrip("/").rpartition("/")
            if name in SPLITS and read_text(location(parent, CONTRACT_FILE)) is not None:
                raise UserError(
                    f"{folder} is one split of the stream in {parent}: pass "
                    f"data.input_dir={parent}"
                )
            if unfinished(folder):
                raise UserError(
                    f"{folder} is a stream that optimize.py did not finish (no {CONTRACT_FILE}): "
                    "remove it and write it again with python optimize.py"
                )
            raise UserError(
                f"{folder} holds no {CONTRACT_FILE}: it is not a stream; write one with python "
                "optimize.py data=<data> output_dir=<a new folder>"
            )
        try:
            data = json.loads(text)
        except ValueError as error:
            raise UserError(
                f"{location(folder, CONTRACT_FILE)} is not JSON ({error}): write the stream "
                "again with optimize.py"
            ) from None
        stored = Contract.from_dict(data, location(folder, CONTRACT_FILE))
        if self.trained and self.trained != stored:
            raise UserError(
                f"{folder} was prepared with another contract than the model's; optimize the "
                "data the model was trained on, or evaluate it on data=<its data config>"
            )
        self.kind = stored.input.kind
        return stored

    def fit(self, stored: Contract) -> Contract:
        return stored

    @property
    def shapes(self) -> dict[str, int | None]:
        # A stream of texts: its tokenizer's size and its texts' length in tokens too, which the
        # text networks read as data.vocab_size and data.max_length.
        preprocessing = self.contract.preprocessing
        return {
            **super().shapes,
            "vocab_size": getattr(preprocessing, "vocab_size", None),
            "max_length": getattr(preprocessing, "max_length", None),
        }

    def apply(self, stored: Contract, contract: Contract) -> dict:
        # Each loader opens its split: a StreamingDataset learns the DDP ranks when it is made,
        # and the ranks exist only once the Trainer has started them.
        return {}

    def loader(self, split: str, as_evaluated: bool = False) -> StreamLoader:
        allow_plain_http_object_storage()
        train = split == "train" and not as_evaluated
        dataset = StreamingDataset(
            location(self.hparams.input_dir, split),
            cache_dir=self.hparams.cache_dir,
            max_cache_size=self.hparams.max_cache_size,
            shuffle=train,
            seed=run_seed(),
            # Training ranks take equal shares (LitData drops the few left over) so that no rank
            # waits at a collective; evaluation counts every sample once.
            drop_last=None if train or not distributed() else False,
            transform=as_pair,
        )
        self.check_shares(split, dataset)
        return StreamLoader(
            dataset,
            batch_size=self.hparams.batch_size,
            num_workers=self.hparams.num_workers,
            pin_memory=self.pins_memory(),
            # As in loaders.make_loader: not from the global generator that dropout draws from.
            generator=torch.Generator().manual_seed(torch.initial_seed()),
        )

    def check_shares(self, split: str, dataset: StreamingDataset) -> None:
        """One line, on every DDP process alike, for a split too small to give each a batch:
        LitData shares a split out in whole batches, and the process left without one would
        stop Lightning (or wait forever at the others' first collective)."""
        if not distributed():
            return
        size = sum(end - start for start, end in dataset.region_of_interest)
        processes, batch_size = dist.get_world_size(), self.hparams.batch_size
        if size < processes * batch_size:
            raise UserError(
                f"the {split} split of {self.hparams.input_dir} holds {size} samples, fewer than "
                f"a batch of data.batch_size={batch_size} for each of {processes} processes: "
                "lower data.batch_size, or train on fewer processes"
            )


def write_contract(folder: str, contract: Contract) -> None:
    write_text(location(folder, CONTRACT_FILE), json.dumps(contract.to_dict(), indent=2) + "\n")
