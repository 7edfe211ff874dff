"""Where the project's training time goes beyond the network: milliseconds per epoch spent in
each hook of each default callback, of the model and of the logger, in one real run.

    python benchmarks/hook_costs.py [--epochs 15] [--threads 1] [--project DIR]

Timed inside a real `python train.py` (progress bar off, as in train_overhead.py), so the
numbers include what a micro-benchmark misses: caches left cold by the forward and backward
passes. They do not include Lightning's own cost of calling each hook on every callback.
"""

import argparse
import tempfile
from pathlib import Path

from common import PROJECT, add_arguments, report, setup, train_with_probe


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15, help="epochs of the run")
    parser.add_argument("--top", type=int, default=20, help="rows to print, costliest first")
    add_arguments(parser)
    args = parser.parse_args()

    project = setup(args)
    with tempfile.TemporaryDirectory(prefix="bench-hooks-") as scratch:
        scratch = Path(scratch)
        per_epoch = train_with_probe(
            project, PROJECT, args.epochs, scratch / "run", "HookTimer", scratch / "hooks.json"
        )
    ranked = sorted(per_epoch.items(), key=lambda item: -item[1])
    report(
        "hook_costs",
        f"Milliseconds per training epoch spent in each hook, one run of {args.epochs} epochs",
        ["hook", "ms/epoch"],
        [[name, ms] for name, ms in ranked[: args.top]],
        {"project": str(project), "epochs": args.epochs, "ms_per_epoch": per_epoch},
    )


if __name__ == "__main__":
    main()
