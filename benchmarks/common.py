"""Shared by every benchmark: the common options, render the default project, run `train.py` in
it with a probe callback (probes.py) or run a baseline (baselines.py), time, summarize, print a
table and write the results as JSON to benchmarks/results/<name>.json."""

import csv
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
PACKAGE = "digit_classifier"  # the default render's import name

# The project as users run it, minus the progress bar (it only draws; the logger still logs).
PROJECT = ["trainer.enable_progress_bar=false"]


# glibc's allocator hands large freed blocks back to the OS and page-faults them in again when
# the next step allocates its activations: about 10,000 faults per epoch of the example model,
# in some processes and not others, which moved the same run's time by 15 %. These settings keep
# freed memory in the process (Linux with glibc; other allocators ignore them).
STEADY_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}


def add_arguments(parser, steady_malloc: bool = True) -> None:
    """Options every benchmark takes; with `steady_malloc=False` its processes keep glibc's
    allocator as it is and there is no --default-malloc."""
    parser.add_argument("--project", help="an existing default render to use instead of a new one")
    parser.add_argument(
        "--threads",
        type=int,
        help="torch threads in every measured process (OMP_NUM_THREADS); default: torch's own. "
        "On a machine that other jobs keep busy, 1 avoids threads spinning against each other.",
    )
    if not steady_malloc:
        parser.set_defaults(default_malloc=True)
        return
    parser.add_argument(
        "--default-malloc",
        action="store_true",
        help="leave glibc's allocator as it is; by default every measured process keeps the memory "
        "it frees (" + ", ".join(STEADY_MALLOC) + "), so that page faults do not add noise",
    )


def setup(args) -> Path:
    """Applies the common options; returns the project to measure."""
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(args.threads)
    if not args.default_malloc:
        os.environ.update(STEADY_MALLOC)
    return render_default(args.project)


def render_default(project: str | None = None) -> Path:
    """The default render of the working tree, or an existing render passed as `project`."""
    if project:
        return Path(project).resolve()
    from cookiecutter.main import cookiecutter

    output = tempfile.mkdtemp(prefix="bench-")
    return Path(cookiecutter(str(REPO), no_input=True, output_dir=output))


def project_env(project: Path, **extra: str) -> dict:
    """The environment of `python train.py` in a render used without installing it; the probe
    callbacks (benchmarks/probes.py) are importable too."""
    path = os.pathsep.join([str(project / "src"), str(HERE)])
    return {**os.environ, "PYTHONPATH": path, "PYTHONWARNINGS": "ignore", **extra}


def run(
    command: list[str], cwd: Path, env: dict | None = None, timeout: int = 1800, status: int = 0
) -> float:
    """Runs `command`, returns its wall time in seconds; raises with its output's tail unless it
    ends with exit `status` (1: a command that must refuse its input)."""
    start = time.perf_counter()
    result = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    elapsed = time.perf_counter() - start
    if result.returncode != status:
        tail = (result.stdout + result.stderr)[-3000:]
        raise RuntimeError(f"{' '.join(map(str, command))} failed ({result.returncode}):\n{tail}")
    return elapsed


def python(*args: str) -> list[str]:
    return [sys.executable, *args]


def train_with_probe(
    project: Path, overrides: list[str], epochs: int, run_dir: Path, probe: str, output: Path
) -> dict:
    """`python train.py` for exactly `epochs` epochs, no test, with the callback `probes.<probe>`
    writing JSON to `output`; returns what it wrote."""
    command = probed_training(overrides, epochs, run_dir, probe, output)
    run(command, project, project_env(project))
    return json.loads(output.read_text())


def probed_training(
    overrides: list[str], epochs: int, run_dir: Path, probe: str, output: Path
) -> list[str]:
    """The command line of train_with_probe."""
    overrides = [
        *overrides,
        f"trainer.max_epochs={epochs}",
        f"trainer.min_epochs={epochs}",  # early stopping stays on but cannot end the run early
        "test=false",
        f"hydra.run.dir={run_dir}",
        f"+callbacks.zz_probe._target_=probes.{probe}",
        f"+callbacks.zz_probe.path={output}",
    ]
    return python("train.py", *overrides)


def write_image_folder(root: Path, count: int, classes: int = 10) -> None:
    """`count` small PNG files (24x24 RGB noise) in `classes` class folders under `root`."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for index in range(count):
        folder = root / f"class{index % classes}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (24, 24, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{index}.png")


def train_and_export(project: Path, scratch: Path, env: dict) -> Path:
    """A brief training run of the default project (3 epochs), exported to ONNX; its folder."""
    train_dir, export_dir = scratch / "train", scratch / "export"
    overrides = ["trainer.max_epochs=3", "logger=csv", "test=false", f"hydra.run.dir={train_dir}"]
    run(python("train.py", *overrides), project, env)
    best = train_dir / "checkpoints" / "best.ckpt"
    run(
        python("export.py", f"ckpt_path={best}", "formats=[onnx]", f"hydra.run.dir={export_dir}"),
        project,
        env,
    )
    return export_dir


# export.py's names of the ONNX variants, by what the latency tables call them.
ONNX_VARIANTS = {"fp32": "onnx", "int8": "onnx_int8", "optimized": "onnx_optimized"}


def against_handwritten(
    project: Path, data: list[str], epochs: int, rounds: int, scratch: Path
) -> dict:
    """Seconds per epoch of the project on `data` and of the hand-written loop over the same
    network and batches (baselines.py `handwritten`), `rounds` interleaved pairs."""
    seconds: dict[str, list[float]] = {"project": [], "hand-written loop": []}
    for index in range(rounds):
        folder = Path(tempfile.mkdtemp(dir=scratch))
        times = train_with_probe(
            project, [*PROJECT, *data], epochs, folder / "run", "EpochTimer", folder / "p.json"
        )
        seconds["project"].append(steady_epoch(times))
        hand = folder / "hand.json"
        run_baseline(project, "handwritten", str(epochs), str(hand), str(folder), *data)
        seconds["hand-written loop"].append(steady_epoch(json.loads(hand.read_text())))
        print(f"round {index + 1}: {seconds['project'][-1]:.3f} s against "
              f"{seconds['hand-written loop'][-1]:.3f} s per epoch", flush=True)  # fmt: skip
    return seconds


def export_latency(
    project: Path, data: list[str], epochs: int, repeats: int, scratch: Path
) -> dict:
    """export.py's own results (latency, metric) for eager and every ONNX variant of a model
    trained `epochs` epochs on `data`."""
    run_dir, export_dir = scratch / "train", scratch / "export"
    overrides = [*PROJECT, *data, f"trainer.max_epochs={epochs}", "test=false"]
    run(python("train.py", *overrides, f"hydra.run.dir={run_dir}"), project, project_env(project))
    best = run_dir / "checkpoints" / "best.ckpt"
    formats = "formats=[" + ",".join(ONNX_VARIANTS.values()) + "]"
    command = ["export.py", f"ckpt_path={best}", formats, f"latency.repeats={repeats}"]
    run(python(*command, f"hydra.run.dir={export_dir}"), project, project_env(project))
    return json.loads((export_dir / "report.json").read_text())["results"]


def run_baseline(project: Path, name: str, *args: str) -> None:
    """`python baselines.py <name> <args>` in a process of its own, inside the project."""
    run(baseline(name, *args), project, project_env(project))


def baseline(name: str, *args: str) -> list[str]:
    """The command line of run_baseline."""
    return python(str(HERE / "baselines.py"), name, *args)


def logged_values(run_dir: Path, metric: str) -> list[float]:
    """Every value of `metric` in a run's CSV log (logger=csv); empty without one."""
    metrics = next(run_dir.rglob("metrics.csv"), None)
    if not metrics:
        return []
    with metrics.open() as file:
        return [float(row[metric]) for row in csv.DictReader(file) if row.get(metric)]


def steady_epoch(times: dict, key: str = "epoch_starts") -> float:
    """Mean per epoch without the first and the last: seconds (probes.Clock), or with
    key="page_faults" the minor page faults."""
    marks = times[key]
    if key != "epoch_starts":
        return (marks[-1] - marks[1]) / (len(marks) - 2)
    ends = times["epoch_ends"][1:]  # the end of each epoch but the first; the last has none
    return sum(end - start for start, end in zip(marks[1:-1], ends, strict=True)) / len(ends)


def median(values) -> float:
    return statistics.median(values)


def machine() -> dict:
    """What the numbers were measured on, and how busy it was when the benchmark started."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    return {
        "cpu": cpu,
        "cores": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average": [round(load, 2) for load in os.getloadavg()],
        "malloc": {name: os.environ.get(name) for name in STEADY_MALLOC},
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
    }


def table(headers: list[str], rows: list[list]) -> str:
    """A plain text table; floats get 3 significant decimals."""

    def cell(value) -> str:
        return f"{value:.3f}" if isinstance(value, float) else str(value)

    cells = [headers, *[[cell(value) for value in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(value.ljust(width) for value, width in zip(row, widths, strict=True))
        for row in cells
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def report(name: str, title: str, headers: list[str], rows: list[list], data: dict) -> Path:
    """Prints the table and writes everything, with the machine, to results/<name>.json."""
    info = machine()
    print(f"\n{title}")
    print(
        f"machine: {info['cpu']}, {info['cores']} cores, torch {info['torch']}, load {info['load_average']}"
    )
    print(table(headers, rows))
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {
        "benchmark": name,
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": info,
        "table": {"headers": headers, "rows": rows},
        **data,
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"-> {path.relative_to(REPO)}")
    return path
