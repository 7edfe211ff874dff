"""Start-up: config-only commands against a bare Python, and the time to the first training step.

    python benchmarks/startup.py [--repeats 5] [--project DIR]

Wall time of `python -c pass`, `python train.py --help` and `python train.py --cfg job`,
interleaved, median of the repeats; whether the config-only commands import torch or Lightning
(from `python -X importtime`); and for `python train.py`, the time from launch to the start of
fitting, to the first training step (after the sanity-check validation), split into stages.
Goal: config-only commands under 1 s.
"""

import argparse
import subprocess
import tempfile
import time
from pathlib import Path

from common import (
    add_arguments,
    median,
    project_env,
    python,
    report,
    run,
    setup,
    train_with_probe,
)

COMMANDS = {
    "python -c pass": ["-c", "pass"],
    "python train.py --help": ["train.py", "--help"],
    "python train.py --cfg job": ["train.py", "--cfg", "job"],
}
HEAVY = ("torch", "pytorch_lightning", "lightning_fabric", "torchmetrics")


def heavy_imports(project: Path, args: list[str]) -> list[str]:
    """The heavy packages that a command imports."""
    result = subprocess.run(
        python("-X", "importtime", *args),
        cwd=project,
        env=project_env(project),
        capture_output=True,
        text=True,
        check=True,
    )
    modules = {
        line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if "|" in line
    }
    return sorted(name for name in HEAVY if name in modules)


def first_step(project: Path, scratch: Path) -> dict[str, float]:
    """Seconds from launching `python train.py` to the start of fitting and to the first step."""
    scratch = Path(tempfile.mkdtemp(dir=scratch))  # a new run directory: nothing to auto-resume
    launched = time.time()
    # One epoch of two batches (the trainer.min_epochs=1 that this adds is the config's own).
    probe = train_with_probe(
        project,
        ["+trainer.limit_train_batches=2"],
        1,
        scratch / "run",
        "EpochTimer",
        scratch / "times.json",
    )
    return {
        "launch -> fit starts (imports, config, objects, run metadata)": probe["fit_start"]
        - launched,
        "fit starts -> training starts (sanity-check validation)": probe["train_start"]
        - probe["fit_start"],
        "launch -> first training step": probe["first_step"] - launched,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    add_arguments(parser)
    args = parser.parse_args()

    project = setup(args)
    env = project_env(project)
    seconds = {name: [] for name in COMMANDS}
    steps: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as scratch:
        for _ in range(args.repeats):
            for name, command in COMMANDS.items():
                seconds[name].append(run(python(*command), project, env))
        for _ in range(max(1, args.repeats // 2)):
            for name, value in first_step(project, Path(scratch)).items():
                steps.setdefault(name, []).append(value)

    bare = median(seconds["python -c pass"])
    imports = {name: heavy_imports(project, command) for name, command in COMMANDS.items()}
    rows = [
        [name, median(values), median(values) - bare, ", ".join(imports[name]) or "none"]
        for name, values in seconds.items()
    ]
    rows += [[name, median(values), "", ""] for name, values in steps.items()]
    report(
        "startup",
        f"Start-up: wall seconds, median of {args.repeats} (first step: {max(1, args.repeats // 2)})",
        ["command", "seconds", "over python -c pass", "heavy imports"],
        rows,
        {
            "project": str(project),
            "seconds": seconds,
            "first_step": steps,
            "heavy_imports": imports,
        },
    )


if __name__ == "__main__":
    main()
