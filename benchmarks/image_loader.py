"""The image loader: images per second from files against memory, and how long training waits.

    python benchmarks/image_loader.py [--rounds 3] [--seconds 6] [--epochs 6] [--workers 0 1 2]
    python benchmarks/image_loader.py --gpu    # training on a CUDA GPU: workers 0 and 4, pinned
                                               # memory off and on

Writes the image-folder example (the project's scripts/example_images.py: 1,797 digits as
32x32 RGB PNG files) to a scratch folder, then measures:

- images per second over its training split as training reads it (augmented, shuffled, batches
  of 64, resized to 64x64): the file-backed loader with 0, 1 and 2 worker processes, pinned
  memory on and off, against the same images decoded once and sliced from memory
  (baselines.image_loaders); and the handover: the milliseconds the training process spends
  taking a batch from a worker that has it ready (baselines.handover_ms), which every batch
  waits with workers however fast they read;
- `python train.py data=images` on it with each `data.num_workers` in --workers, and with one
  worker that is not kept between epochs (`data.persistent_workers=false`), everything else as
  configured: the training seconds per epoch and the share of them spent waiting
  between batches, by the benchmark's probe (probes.EpochTimer) and by the project's own
  TrainingDiagnostics (`perf/data_wait_frac` in metrics.csv); medians over the epochs after the
  first (which starts the workers).

Each round measures everything once, the training runs in rotating order; medians over rounds.
"""

import argparse
import json
import tempfile
from pathlib import Path

from common import (
    PROJECT,
    add_arguments,
    logged_values,
    median,
    python,
    report,
    run,
    run_baseline,
    setup,
    train_with_probe,
)


def training(project: Path, root: Path, data: list[str], epochs: int, scratch: Path) -> dict:
    scratch = Path(tempfile.mkdtemp(dir=scratch))  # a new run directory: nothing to auto-resume
    overrides = [*PROJECT, "logger=csv", "data=images", f"data.root={root}", *data]
    times = train_with_probe(
        project, overrides, epochs, scratch / "run", "EpochTimer", scratch / "times.json"
    )
    steady = list(zip(times["wait"][1:], times["train"][1:], strict=True))
    logged = logged_values(scratch / "run", "perf/data_wait_frac")
    return {
        "seconds_per_epoch": median([train for _, train in steady]),
        "wait_probe": median([wait / train for wait, train in steady]),
        "wait_diagnostics": median(logged),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="per loader, in 3 windows")
    parser.add_argument("--epochs", type=int, default=6, help="of each training run")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--gpu",
        action="store_true",
        help="train on a CUDA GPU with 0 and 4 workers, pinned memory off and on (about 5 min)",
    )
    add_arguments(parser)
    args = parser.parse_args()

    project = setup(args)
    if args.gpu:  # is the GPU waiting for data?
        variants = [
            ["trainer=gpu", f"data.num_workers={workers}", f"data.pin_memory={pinned}"]
            for workers in (0, 4)
            for pinned in ("false", "true")
        ]
    else:
        variants = [[f"data.num_workers={workers}"] for workers in args.workers]
        variants.append(["data.num_workers=1", "data.persistent_workers=false"])
    rates, handovers, runs = {}, [], {" ".join(data): [] for data in variants}
    with tempfile.TemporaryDirectory(prefix="bench-images-") as scratch:
        scratch = Path(scratch)
        root = scratch / "images"
        run(python("scripts/example_images.py", str(root)), project)
        for round_ in range(args.rounds):
            path = scratch / f"rates{round_}.json"
            run_baseline(project, "image_loaders", str(path), str(root), str(args.seconds))
            measured = json.loads(path.read_text())
            for name, rate in measured["images_per_second"].items():
                rates.setdefault(name, []).append(rate)
            handovers.append(measured["handover_ms"])
            # Rotating order, so that a busy moment does not always slow the same variant.
            for data in variants[round_ % len(variants) :] + variants[: round_ % len(variants)]:
                runs[" ".join(data)].append(training(project, root, data, args.epochs, scratch))

    rates = {name: median(values) for name, values in rates.items()}
    runs = {
        data: {key: median([r[key] for r in rs]) for key in rs[0]} for data, rs in runs.items()
    }
    memory = rates["memory"]
    rows = [[name, round(rate), rate / memory, "", ""] for name, rate in rates.items()]
    handover = median(handovers)
    rows.append([f"taking a ready batch from a worker: {handover:.2f} ms", "", "", "", ""])
    for data, result in runs.items():
        wait = f"{result['wait_probe']:.3f} / {result['wait_diagnostics']:.3f}"
        rows.append([f"training, {data}", "", "", result["seconds_per_epoch"], wait])
    report(
        "image_loader",
        f"Image loader: images/s over the training split (batches of 64, 64x64 RGB) and training, median of {args.rounds} rounds",
        ["loader or training run", "images/s", "x memory", "s/epoch", "wait: probe / logged"],
        rows,
        {
            "project": str(project),
            "images_per_second": rates,
            "handover_ms": handover,
            "training": runs,
        },
    )


if __name__ == "__main__":
    main()
