"""Where the project's training time goes beyond the network: milliseconds per epoch spent in
each hook of each default callback, of the model and of the logger, in one real run.

    python benchmarks/hook_costs.py [--epochs 15] [--threads 1] [--project DIR]

Timed inside a real `python train.py` (progress bar off, as in train_overhead.py), so the
numbers include what a micro-benchmark misses: caches left cold by the forward and backward
passes. They do not include Lightning's own cost of calling each hook on every callback.
"""

import argparse
import json
import tempfile
from pathlib import Path

from common import add_arguments, project_env, python, report, run, setup
from train_overhead import PROJECT


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15, help="epochs of the run")
    parser.add_argument("--top", type=int, default=20, help="rows to print, costliest first")
    add_arguments(parser)
    args = parser.parse_args()

    project = setup(args)
    with tempfile.TemporaryDirectory(prefix="bench-hooks-") as scratch:
        path = Path(scratch) / "hooks.json"
        overrides = [
            *PROJECT,
            f"trainer.max_epochs={args.epochs}",
            f"trainer.min_epochs={args.epochs}",
            "test=false",
            f"hydra.run.dir={Path(scratch) / 'run'}",
            "+callbacks.zz_hooks._target_=probe.HookTimer",
            f"+callbacks.zz_hooks.path={path}",
        ]
        run(python("train.py", *overrides), project, project_env(project))
        per_epoch = json.loads(path.read_text())
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
