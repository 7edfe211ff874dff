"""Seconds per training epoch: the generated project against a hand-written PyTorch loop.

    python benchmarks/train_overhead.py [--pairs 7] [--epochs 10] [--breakdown | --goal]
                                        [--project DIR]

Each round runs every variant once, in a fresh process, in rotating order, so that a busy
machine slows all of them alike. An epoch is one pass over the training split plus one
validation pass and every epoch-end hook. A run's steady-state time is the mean of its epochs
without the first (warm-up) and the last (it ends with the one-off pictures drawn when training
ends): the mean, not the median, so that work done every few epochs counts in full. Ratios are
taken within each round, to the hand-written loop and to Lightning's loop alone, then the median
over rounds is reported, with the minor page faults per epoch (see --default-malloc in common.py).

"Lightning's loop alone" trains the project's model on its data with no callback, logger or
checkpoint: the floor that no change inside the project can go below.

--goal runs only the project, Lightning's loop alone and the hand-written loop: the goal's ratio
(issue 24: at most 1.05x Lightning's loop alone) moves by several percent from round to round,
and half the runs per round allow twice the rounds in the same time.

--breakdown adds the project with each default callback (and the logger) removed in turn: the
difference to the full project is what that piece costs per epoch; and Lightning's loop alone with
manual optimization (no closure, fewer hooks per step).
"""

import argparse
import json
import tempfile
from pathlib import Path

from common import (
    PROJECT,
    add_arguments,
    median,
    report,
    run_baseline,
    setup,
    steady_epoch,
    train_with_probe,
)

LOOP = "Lightning's loop alone"


def default_callbacks(project: Path) -> list[str]:
    """The names of the callbacks that the project's default train config adds."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(str(project / "configs"), version_base="1.3"):
        return list(compose("train").callbacks)


def variants(project: Path, breakdown: bool, goal: bool) -> dict[str, list[str] | str]:
    """Name -> overrides of `python train.py`, or the name of a baseline in baselines.py."""
    runs: dict[str, list[str] | str] = {
        "project": PROJECT,
        "hand-written loop": "handwritten",
        LOOP: "lightning_loop",
    }
    if goal:
        return runs
    runs |= {
        "plain Lightning": "plain_lightning",
        "project, model.compile=true": [*PROJECT, "model.compile=true"],
        # As the project saved last.ckpt before it was written by time: at every epoch's end.
        "project, last.ckpt every epoch": [*PROJECT, "callbacks.last_checkpoint.min_interval_s=0"],
    }
    if breakdown:
        callbacks = [name for name in default_callbacks(project) if name != "rich_progress_bar"]
        runs |= {f"project without {name}": [*PROJECT, f"~callbacks.{name}"] for name in callbacks}
        # LearningRateMonitor refuses to run without a logger.
        runs["project without logger and lr_monitor"] = [
            *PROJECT,
            "~logger",
            "~callbacks.lr_monitor",
        ]
        runs["project with its progress bar"] = []
        runs["Lightning's loop alone, manual optimization"] = "lightning_manual"
    return runs


def train_once(project: Path, how: list[str] | str, epochs: int, scratch: Path) -> dict:
    """One training run in its own process; returns its timestamps (probes.Clock)."""
    scratch = Path(tempfile.mkdtemp(dir=scratch))  # a new run directory: nothing to auto-resume
    times = scratch / "times.json"
    if isinstance(how, str):
        run_baseline(project, how, str(epochs), str(times), str(scratch / "run"))
        return json.loads(times.read_text())
    return train_with_probe(project, how, epochs, scratch / "run", "EpochTimer", times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=7, help="rounds of interleaved runs")
    parser.add_argument(
        "--epochs", type=int, default=10, help="epochs per run (the first and last are dropped)"
    )
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--breakdown", action="store_true", help="also remove each callback in turn")
    only.add_argument(
        "--goal", action="store_true", help="only the project and the two loops, for more rounds"
    )
    add_arguments(parser)
    args = parser.parse_args()
    if args.epochs < 3:
        parser.error("--epochs must be at least 3: the first and the last epoch are dropped")

    project = setup(args)
    runs = variants(project, args.breakdown, args.goal)
    names = list(runs)
    epoch_s = {name: [] for name in names}
    faults = {name: [] for name in names}
    ratios = {name: [] for name in names}
    over_loop = {name: [] for name in names}  # the goal's measure: x Lightning's loop alone
    with tempfile.TemporaryDirectory(prefix="bench-train-") as scratch:
        for round_ in range(args.pairs):
            order = names[round_ % len(names) :] + names[: round_ % len(names)]
            seconds = {}
            for name in order:
                times = train_once(project, runs[name], args.epochs, Path(scratch))
                seconds[name] = steady_epoch(times)
                epoch_s[name].append(seconds[name])
                faults[name].append(steady_epoch(times, "page_faults"))
            for name in names:
                ratios[name].append(seconds[name] / seconds["hand-written loop"])
                over_loop[name].append(seconds[name] / seconds[LOOP])
            print(
                f"round {round_ + 1}/{args.pairs}: "
                + ", ".join(f"{name} {seconds[name]:.3f}s" for name in names),
                flush=True,
            )

    base = median(epoch_s["project"])
    rows = []
    for name in names:
        row = [name, median(epoch_s[name]), median(ratios[name]), median(over_loop[name])]
        row.append(round(median(faults[name])))
        if args.breakdown:
            row.append((base - median(epoch_s[name])) * 1000)
        rows.append(row)
    headers = [
        "variant",
        "s/epoch (median of rounds)",
        "x hand-written (median of rounds)",
        "x Lightning's loop alone (median of rounds)",
        "page faults/epoch",
    ]
    if args.breakdown:
        headers.append("ms/epoch saved vs project")
    report(
        "train_overhead",
        f"Training: steady-state seconds per epoch, {args.pairs} interleaved rounds of {args.epochs} epochs",
        headers,
        rows,
        {
            "project": str(project),
            "pairs": args.pairs,
            "epochs": args.epochs,
            "seconds_per_epoch": epoch_s,
            "page_faults_per_epoch": faults,
            "ratio_to_handwritten": ratios,
            "ratio_to_lightning_loop": over_loop,
        },
    )


if __name__ == "__main__":
    main()
