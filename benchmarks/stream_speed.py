"""Training from LitData chunks (`data=stream`) against the image folder they were written from.

    python benchmarks/stream_speed.py [--rounds 3] [--epochs 6] [--files N] [--stream-workers 1 0]

Writes the image-folder example (the project's scripts/example_images.py: 1,797 digits as 32x32
RGB PNG files, trained on at 32x32) or, with --files, N small PNG files (24x24 RGB noise, 10
classes) to a scratch folder, writes it once as chunks with `python optimize.py data=images`
(timed: a one-time cost), then in interleaved rounds, in rotating order, trains `python train.py
data=images data.root=<folder>` and `python train.py data=stream data.input_dir=<chunks>` with
each `data.num_workers` of --stream-workers, everything else as configured: the same model and
batches of 64; the folder's one worker persists between epochs, LitData's loaders fork theirs
anew each epoch. Each run reports, over its epochs after the first (which starts the workers):

- training images/s by the benchmark's probe (probes.EpochTimer: the epoch's training samples
  over its training seconds) and by the project's TrainingDiagnostics (`perf/samples_per_sec`);
- seconds per epoch, validation and every epoch-end hook included;
- the share of training time spent waiting between batches (probe / `perf/data_wait_frac`);
- the training process's minor page faults per epoch: after each fork of a worker it copies
  every page it writes to that the worker still shares;

and the ratios stream / folder. The two do not do the same work per image: the folder decodes
each PNG file, resizes it and augments it (a random crop) in its worker every epoch; the stream
stores each image as evaluation prepares it (decoded, resized, normalized, as float32), so its
loader only reads and unpickles it, and its training images are not augmented.
"""

import argparse
import os
import tempfile
from pathlib import Path

from common import (
    PROJECT,
    add_arguments,
    logged_values,
    median,
    project_env,
    python,
    report,
    run,
    setup,
    steady_epoch,
    train_with_probe,
    write_image_folder,
)

FOLDER = "data=images (files)"
RATES = ("images_per_second", "samples_per_sec_logged")  # by the probe, by the diagnostics


def training(project: Path, data: list[str], epochs: int, scratch: Path) -> dict:
    scratch = Path(tempfile.mkdtemp(dir=scratch))  # a new run directory: nothing to auto-resume
    overrides = [*PROJECT, "logger=csv", *data]
    times = train_with_probe(
        project, overrides, epochs, scratch / "run", "EpochTimer", scratch / "times.json"
    )
    steady = list(zip(times["samples"][1:], times["train"][1:], times["wait"][1:], strict=True))
    return {
        "images_per_second": median([samples / train for samples, train, _ in steady]),
        "samples_per_sec_logged": median(logged_values(scratch / "run", "perf/samples_per_sec")),
        "seconds_per_epoch": steady_epoch(times),
        "wait_probe": median([wait / train for _, train, wait in steady]),
        "wait_logged": median(logged_values(scratch / "run", "perf/data_wait_frac")),
        "page_faults_per_epoch": steady_epoch(times, "page_faults"),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=6, help="of each training run (at least 3)")
    parser.add_argument("--files", type=int, help="generated PNG files instead of the example")
    parser.add_argument(
        "--stream-workers",
        type=int,
        nargs="+",
        default=[1, 0],
        help="the data.num_workers of each stream run (the folder's stays as configured)",
    )
    add_arguments(parser)
    args = parser.parse_args()
    project = setup(args)
    with tempfile.TemporaryDirectory(prefix="bench-stream-") as scratch:
        scratch = Path(scratch)
        root, chunks = scratch / "images", scratch / "chunks"
        if args.files:
            write_image_folder(root, args.files)
        else:
            run(python("scripts/example_images.py", str(root)), project)
        # The folder's setup cache lives in the scratch folder too, not in the project's .cache.
        images = ["data=images", f"data.root={root}", f"data.cache_dir={scratch / 'cache'}"]
        optimize_s = run(
            python("optimize.py", *images, f"output_dir={chunks}", f"hydra.run.dir={scratch}/o"),
            project,
            project_env(project),
        )
        variants = {FOLDER: images}
        for workers in args.stream_workers:
            stream = ["data=stream", f"data.input_dir={chunks}", f"data.num_workers={workers}"]
            variants[f"data=stream (chunks), {workers} workers"] = stream
        names = list(variants)
        runs: dict[str, list[dict]] = {name: [] for name in names}
        loads, ratios = [], []
        for round_ in range(args.rounds):
            loads.append(round(os.getloadavg()[0], 2))
            # Rotating order, so that a busy moment does not always slow the same variant.
            for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                runs[name].append(training(project, variants[name], args.epochs, scratch))
            folder = runs[FOLDER][-1]
            ratios.append(
                {name: [runs[name][-1][key] / folder[key] for key in RATES] for name in names[1:]}
            )
            print(f"round {round_ + 1}: stream / folder images/s (probe, logged): "
                  + "; ".join(f"{name}: {probe:.2f}x, {logged:.2f}x"
                              for name, (probe, logged) in ratios[-1].items()),
                  flush=True)  # fmt: skip

    keys = list(runs[FOLDER][0])
    medians = {
        name: {key: median([r[key] for r in rs]) for key in keys} for name, rs in runs.items()
    }
    folder = medians[FOLDER]
    rows = []
    for name, result in medians.items():
        wait = f"{result['wait_probe']:.3f} / {result['wait_logged']:.3f}"
        rows.append(
            [name, round(result["images_per_second"]), round(result["samples_per_sec_logged"]),
             result["seconds_per_epoch"], wait, round(result["page_faults_per_epoch"])]
        )  # fmt: skip
    for name in names[1:]:
        result = medians[name]
        rows.append(
            ["stream / folder, " + name.rsplit(", ", 1)[1], result["images_per_second"] / folder["images_per_second"],
             result["samples_per_sec_logged"] / folder["samples_per_sec_logged"],
             result["seconds_per_epoch"] / folder["seconds_per_epoch"], "", ""]
        )  # fmt: skip
    rows.append([f"optimize.py, once: {optimize_s:.1f} s", "", "", "", "", ""])
    source = f"{args.files:,} generated PNG files" if args.files else "the image-folder example"
    report(
        f"stream_speed-{args.files}" if args.files else "stream_speed",
        f"Training from chunks against the image folder ({source}), median of {args.rounds} "
        f"rounds; load average per round {loads}",
        [
            "training run",
            "images/s (probe)",
            "perf/samples_per_sec",
            "s/epoch",
            "wait: probe / logged",
            "page faults/epoch",
        ],
        rows,
        {
            "project": str(project),
            "source": source,
            "optimize_seconds": optimize_s,
            "load_average_per_round": loads,
            "ratios_per_round": ratios,
            "runs": runs,
            "medians": medians,
        },
    )


if __name__ == "__main__":
    main()
