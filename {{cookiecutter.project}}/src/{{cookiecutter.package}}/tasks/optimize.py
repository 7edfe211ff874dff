"""Optimize: write a dataset's splits as LitData chunks, with the contract fitted on its training
split, for `python train.py data=stream data.input_dir=<the same output_dir>`."""

import os
import signal
from pathlib import Path

from omegaconf import DictConfig

from ..builders import build_datamodule
from ..console import UserError, show
from ..data.base import SPLITS
from ..data.stream import (
    CONTRACT_FILE,
    ChunkSample,
    StreamDataModule,
    holds_files,
    is_remote,
    location,
    unfinished,
    write_contract,
)
from ..launch import Stopped
from ..options import OptimizeOptions, validated
from ..upstream import allow_plain_http_object_storage, interruptible_chunk_writing


def optimize(cfg: DictConfig) -> str:
    options = validated(OptimizeOptions, cfg)
    output_dir = options.output_dir
    if not is_remote(output_dir) and Path(output_dir).is_file():  # not theirs to remove
        raise UserError(f"output_dir={output_dir} is a file; choose a folder for the chunks")
    if unfinished(output_dir):
        raise UserError(
            f"output_dir={output_dir} holds a stream that optimize.py did not finish (no "
            f"{CONTRACT_FILE}): remove it, then run the command again"
        )
    if holds_files(output_dir):  # nothing already written is overwritten or mixed in
        raise UserError(
            f"output_dir={output_dir} already holds files; remove them or choose another "
            "output_dir"
        )
    from litdata import optimize as write_chunks  # once data.stream has found it installed

    allow_plain_http_object_storage()  # before the worker processes are forked
    interruptible_chunk_writing()

    datamodule = build_datamodule(cfg)
    if isinstance(datamodule, StreamDataModule):
        raise UserError("data=stream is already optimized: train from it as it is")
    try:
        write_splits(datamodule, options, write_chunks)
    except KeyboardInterrupt:
        raise Stopped(
            signal.SIGINT,
            f"optimize stopped by Ctrl-C (SIGINT): {output_dir} holds an unfinished stream; "
            "remove it, then run the command again",
        ) from None
    # Last: a stream that holds its contract is complete.
    write_contract(output_dir, datamodule.contract)
    show(
        f"wrote the train, val and test splits to {output_dir}; train on them with: python "
        f"train.py data=stream data.input_dir={output_dir}"
    )
    return output_dir


def write_splits(datamodule, options: OptimizeOptions, write_chunks) -> None:
    for split in SPLITS:
        dataset = datamodule.dataset(split)
        if hasattr(dataset, "unaugmented"):
            dataset = dataset.unaugmented()
        write_chunks(
            fn=ChunkSample(dataset),
            inputs=list(range(len(dataset))),
            output_dir=location(options.output_dir, split),
            num_workers=options.num_workers or os.cpu_count(),
            chunk_bytes=options.chunk_bytes,
            # Forked, as DataLoader's workers are: spawned ones would each import torch again
            # (9 s against 0.2 s for 1,000 digits on 2 cores).
            start_method="fork",
        )
