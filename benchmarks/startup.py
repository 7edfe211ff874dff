"""Start-up: config-only commands and predict on one image against bare Python and the project's
own inference without Hydra, and the time to the first training step.

    python benchmarks/startup.py [--repeats 5] [--project DIR]

Wall time of `python -c pass`, `python train.py --help`, `python train.py --cfg job`, `python
predict.py` on one PNG, and the same prediction by the project's inference functions called
without Hydra (`load_export`, `read_inputs`, `predictions` in `python -c`, the reference),
each a fresh process, interleaved, median of the repeats, with the load average of each round
and the CPU seconds (user and system) of each command; two commands that must refuse their
input (a missing checkpoint, a bad data option) before importing torch;
which heavy packages each command imports (from `python -X importtime`); `--help` also as
Hydra lists config groups without the project's one copy of its repository; and for `python
train.py`, the time from launch to the start of fitting, to the first training step (after the
sanity-check validation), split into stages. Trains the default project for 3 epochs and
exports it first. Goals: `train.py --help` under 1 s; predict at most 1.15x the reference.

`--peer DIR` also times the peer template, ashleve/lightning-hydra-template (a checkout of it:
`git clone https://github.com/ashleve/lightning-hydra-template`, with its `lightning`, `rootutils`
and `hydra-colorlog` installed), from launch to its first training step on the same data
(peer.py: the digits, split and batched as data=digits does), each with its own defaults, in the
same rounds as the project's. Goal: the project no slower.
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import tempfile
import time
from importlib.util import find_spec
from pathlib import Path

import numpy as np
from common import (
    HERE,
    PACKAGE,
    add_arguments,
    median,
    project_env,
    python,
    report,
    run,
    setup,
    train_and_export,
    train_with_probe,
)
from PIL import Image

HEAVY = (
    "torch",
    "pytorch_lightning",
    "lightning_fabric",
    "torchmetrics",
    "hydra",
    "omegaconf",
    "pandas",
)
# predict's work without its command line: the reference predict is measured against.
INFERENCE = f"""
import sys
from pathlib import Path
from {PACKAGE}.inference import load_export, predictions, read_inputs
session, manifest = load_export(Path(sys.argv[1]))
inputs, sources = read_inputs(Path(sys.argv[2]), manifest)
print(predictions(session, manifest, inputs))
"""
# train.py --help as Hydra lists config groups on its own: a copy of its config repository each.
HYDRA_HELP = f"""
import sys
sys.argv = ["train.py", "--help"]
from {PACKAGE} import upstream
upstream.listing_config_groups_once = lambda: None
from {PACKAGE}.cli import train
train()
"""
PREDICT = "python predict.py model=<export> input=<one PNG>"
REFERENCE = "inference functions without Hydra (python -c)"
# Commands that must refuse their input, with exit status 1, before they import torch.
REFUSED = {
    "python eval.py ckpt_path=<no such file> (refused)": ["eval.py", "ckpt_path=none.ckpt"],
    "python train.py data.batch_size=0 (refused)": ["train.py", "data.batch_size=0"],
}
PEER_STEP = "peer template: launch -> first training step"
# The peer's data config for the project's example data (peer.py).
PEER_DATA = "_target_: peer.DigitsDataModule\nbatch_size: 64\n"


def commands(export: Path, image: Path, run_dir: Path) -> dict[str, list[str]]:
    return {
        "python -c pass": ["-c", "pass"],
        "python train.py --help": ["train.py", "--help"],
        "the same, each config group listed from a copy of its own (Hydra's way)": [
            "-c",
            HYDRA_HELP,
        ],
        "python train.py --cfg job": ["train.py", "--cfg", "job"],
        REFERENCE: ["-c", INFERENCE, str(export), str(image)],
        PREDICT: ["predict.py", f"model={export}", f"input={image}", f"hydra.run.dir={run_dir}"],
        **{
            name: [*command, f"hydra.run.dir={run_dir}-{command[0][:-3]}"]
            for name, command in REFUSED.items()
        },
    }


def cpu_seconds() -> float:
    """User and system CPU seconds of this process's ended children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def heavy_imports(project: Path, args: list[str]) -> list[str]:
    """The heavy packages that a command imports."""
    result = subprocess.run(
        python("-X", "importtime", *args),
        cwd=project,
        env=project_env(project),
        capture_output=True,
        text=True,
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


def check_peer(peer: Path, parser: argparse.ArgumentParser) -> None:
    """One line, before anything is measured, for a folder that is not the peer template's
    checkout or an environment without its packages."""
    if not (peer / "src" / "train.py").is_file() or not (peer / "configs" / "data").is_dir():
        parser.error(f"--peer {peer} is not a clone of ashleve/lightning-hydra-template")
    modules = ("lightning", "rootutils", "hydra_plugins.hydra_colorlog")
    missing = [module.split(".")[-1] for module in modules if not find_spec(module)]
    if missing:
        parser.error(
            f"the peer template needs {', '.join(missing)}: pip install lightning==<the installed "
            "pytorch_lightning's version> rootutils hydra-colorlog"
        )


def peer_copy(peer: Path, scratch: Path) -> Path:
    """A copy of the peer template's checkout, with a data config for the digits."""
    copy = scratch / "peer"
    shutil.copytree(peer, copy, ignore=shutil.ignore_patterns(".git"))
    (copy / "configs" / "data" / "digits.yaml").write_text(PEER_DATA)
    return copy


def peer_first_step(peer: Path, scratch: Path) -> float:
    """Seconds from launching the peer's `python src/train.py` on the digits (its defaults
    otherwise) to its first training step."""
    times = Path(tempfile.mkdtemp(dir=scratch)) / "times.json"
    overrides = [
        "data=digits",
        "model.net.input_size=64",
        "trainer.max_epochs=1",
        "+trainer.limit_train_batches=2",
        "test=false",
        f"hydra.run.dir={times.parent / 'run'}",
        "+callbacks.zz_probe._target_=peer.FirstStep",
        f"+callbacks.zz_probe.path={times}",
    ]
    env = {**os.environ, "PYTHONPATH": str(HERE), "PYTHONWARNINGS": "ignore"}
    launched = time.time()
    run(python("src/train.py", *overrides), peer, env)
    return json.loads(times.read_text())["first_step"] - launched


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--peer", type=Path, help="a checkout of ashleve/lightning-hydra-template")
    add_arguments(parser)
    args = parser.parse_args()
    if args.peer:
        check_peer(args.peer, parser)

    project = setup(args)
    env = project_env(project)
    seconds: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    loads: list[float] = []
    steps: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as scratch:
        scratch = Path(scratch)
        export = train_and_export(project, scratch, env)
        image = scratch / "digit.png"
        pixels = np.random.default_rng(0).integers(0, 256, (8, 8), dtype=np.uint8)
        Image.fromarray(pixels).save(image)
        for repeat in range(args.repeats):
            loads.append(os.getloadavg()[0])
            for name, command in commands(export, image, scratch / f"predict-{repeat}").items():
                before, status = cpu_seconds(), int(name in REFUSED)
                wall = run(python(*command), project, env, status=status)
                seconds.setdefault(name, []).append(wall)
                cpu.setdefault(name, []).append(cpu_seconds() - before)
        peer = peer_copy(args.peer, scratch) if args.peer else None
        for _ in range(max(1, args.repeats // 2)):
            for name, value in first_step(project, scratch).items():
                steps.setdefault(name, []).append(value)
            if peer:
                steps.setdefault(PEER_STEP, []).append(peer_first_step(peer, scratch))
        imports = {
            name: heavy_imports(project, command)
            for name, command in commands(export, image, scratch / "predict-imports").items()
        }

    bare = median(seconds["python -c pass"])
    # Each round's predict against the reference of the same round, and the ratio of medians.
    ratios = [p / r for p, r in zip(seconds[PREDICT], seconds[REFERENCE], strict=True)]
    rows = [
        [
            name,
            median(values),
            median(values) - bare,
            median(cpu[name]),
            ", ".join(imports[name]) or "none",
        ]
        for name, values in seconds.items()
    ]
    rows.append(
        [
            "predict / reference (goal: at most 1.15)",
            median(seconds[PREDICT]) / median(seconds[REFERENCE]),
            f"rounds {min(ratios):.2f} to {max(ratios):.2f}",
            "",
            "",
        ]
    )
    rows += [[name, median(values), "", "", ""] for name, values in steps.items()]
    if PEER_STEP in steps:
        ours = steps["launch -> first training step"]
        against_peer = [o / p for o, p in zip(ours, steps[PEER_STEP], strict=True)]
        rows.append(
            [
                "project / peer template, launch -> first step (goal: at most 1)",
                median(ours) / median(steps[PEER_STEP]),
                f"rounds {min(against_peer):.2f} to {max(against_peer):.2f}",
                "",
                "",
            ]
        )
    report(
        "startup",
        f"Start-up: wall seconds, median of {args.repeats} interleaved rounds (first step: "
        f"{max(1, args.repeats // 2)}); load average {min(loads):.2f} to {max(loads):.2f}",
        ["command", "seconds", "over python -c pass", "CPU seconds", "heavy imports"],
        rows,
        {
            "project": str(project),
            "seconds": seconds,
            "cpu_seconds": cpu,
            "predict_over_reference": ratios,
            "load_average_per_round": loads,
            "first_step": steps,
            "heavy_imports": imports,
        },
    )


if __name__ == "__main__":
    main()
