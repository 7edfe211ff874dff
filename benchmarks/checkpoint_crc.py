"""Checkpoint CRC check: what `load_checkpoint`'s check of the zip archive's CRC-32s costs
against loading the checkpoint, on a checkpoint of at least 1 GB.

    python benchmarks/checkpoint_crc.py [--gigabytes 1.0] [--rounds 5] [--project DIR]

Writes a checkpoint of float32 tensors (64 MB each, `--gigabytes` in all) with `torch.save`,
reads it once so that every variant finds it in the page cache, then times, interleaved, median
of the rounds: the check alone (`checkpoints.damaged_member`); `torch.load` as `load_checkpoint`
calls it (`weights_only=True, mmap=True`, which reads nothing yet) followed by a copy of every
tensor, as loading weights into a model does; `torch.load` without mmap, which reads every
byte; and `load_checkpoint` whole (check and mmap load) followed by the same copy.
Goal: the check a small share of a load that reads the weights.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

from common import add_arguments, median, report, setup

TENSOR = 16 << 20  # float32 elements per tensor: 64 MB


def timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def copied(checkpoint: dict) -> None:
    """Every tensor read into fresh memory, as `load_state_dict` copies it into a model."""
    for tensor in checkpoint["state_dict"].values():
        tensor.clone()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gigabytes", type=float, default=1.0, help="size of the checkpoint")
    parser.add_argument("--rounds", type=int, default=5)
    add_arguments(parser, steady_malloc=False)
    args = parser.parse_args()

    project = setup(args)
    sys.path.insert(0, str(project / "src"))
    import torch
    from common import PACKAGE

    checkpoints = __import__(f"{PACKAGE}.checkpoints", fromlist=["load_checkpoint"])
    count = max(1, round(args.gigabytes * 1e9 / (TENSOR * 4)))
    with tempfile.TemporaryDirectory(prefix="bench-crc-") as scratch:
        path = Path(scratch) / "large.ckpt"
        weights = {f"layer{index}.weight": torch.randn(TENSOR) for index in range(count)}
        torch.save({"state_dict": weights}, path)
        del weights
        size = path.stat().st_size
        path.read_bytes()  # into the page cache: every variant reads it from memory
        variants = {
            "CRC-32 check alone (damaged_member)": lambda: checkpoints.damaged_member(path),
            "torch.load(mmap=True) + copy of every tensor": lambda: copied(
                torch.load(path, weights_only=True, mmap=True)
            ),
            "torch.load(mmap=False)": lambda: torch.load(path, weights_only=True),
            "load_checkpoint (check + mmap load) + copy": lambda: copied(
                checkpoints.load_checkpoint(path)
            ),
        }
        seconds = {name: [] for name in variants}
        for _ in range(args.rounds):
            for name, variant in variants.items():
                seconds[name].append(timed(variant))

    check = median(seconds["CRC-32 check alone (damaged_member)"])
    load = median(seconds["torch.load(mmap=True) + copy of every tensor"])
    rows = [
        [name, median(values), median(values) / load, size / median(values) / 1e9]
        for name, values in seconds.items()
    ]
    report(
        "checkpoint_crc",
        f"Checkpoint of {size / 1e9:.2f} GB ({count} tensors): seconds, median of {args.rounds}",
        ["variant", "seconds", "x mmap load + copy", "GB/s"],
        rows,
        {"project": str(project), "bytes": size, "seconds": seconds, "check_share": check / load},
    )


if __name__ == "__main__":
    main()
