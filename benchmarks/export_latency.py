"""Inference latency of the exported formats against eager PyTorch, measured side by side.

    python benchmarks/export_latency.py [--batch-sizes 1 16 64 256] [--repeats 200] [--threads 1]
                                        [--project DIR]

Renders the default project, trains it briefly, then runs its own `export.py`, which times eager
PyTorch, TorchScript, torch.export and onnxruntime in one process, one after the other, on the
same held-out batches: the median over `--repeats` calls after warm-up. Each format's speed-up
is eager time / format time, so above 1 means faster than eager. Goal on CPU: onnxruntime at
batch 1 at least 3x faster than eager. Its processes keep glibc's allocator as it is (the
numbers in benchmarks/README.md were measured so): no --default-malloc here.
"""

import argparse
import json
import tempfile
from pathlib import Path

from common import add_arguments, project_env, python, report, run, setup

FORMATS = {"torchscript": "TorchScript", "torch_export": "torch.export", "onnx": "onnxruntime"}
GOAL = 3.0  # onnxruntime's speed-up over eager at batch 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--repeats", type=int, default=200, help="timed calls per format and size")
    parser.add_argument("--epochs", type=int, default=2, help="training epochs before export")
    add_arguments(parser, steady_malloc=False)
    args = parser.parse_args()

    project = setup(args)
    env = project_env(project)
    with tempfile.TemporaryDirectory(prefix="bench-export-") as scratch:
        train_dir, export_dir = Path(scratch) / "train", Path(scratch) / "export"
        run(
            python(
                "train.py",
                f"trainer.max_epochs={args.epochs}",
                "logger=csv",
                "test=false",
                f"hydra.run.dir={train_dir}",
            ),
            project,
            env,
        )
        run(
            python(
                "export.py",
                f"ckpt_path={train_dir / 'checkpoints' / 'best.ckpt'}",
                f"batch_sizes=[{','.join(map(str, args.batch_sizes))}]",
                f"latency.repeats={args.repeats}",
                f"hydra.run.dir={export_dir}",
            ),
            project,
            env,
        )
        results = json.loads((export_dir / "report.json").read_text())["results"]

    rows = []
    for size in map(str, args.batch_sizes):
        eager = results["eager"]["latency_ms"][size]
        row = [int(size), eager]
        for name in FORMATS:
            ms = results[name]["latency_ms"][size]
            row += [ms, eager / ms]
        rows.append(row)
    headers = ["batch", "eager ms"]
    for label in FORMATS.values():
        headers += [f"{label} ms", "x eager"]
    speedup = rows[0][-1] if args.batch_sizes[0] == 1 else None
    report(
        "export_latency",
        f"Inference latency, median of {args.repeats} calls per cell; x eager = speed-up over eager",
        headers,
        rows,
        {
            "results": results,
            "batch_sizes": args.batch_sizes,
            "repeats": args.repeats,
            "onnxruntime_speedup_at_batch_1": speedup,
            "goal": GOAL,
        },
    )
    if speedup is not None:
        verdict = "met" if speedup >= GOAL else "NOT met"
        print(
            f"goal: onnxruntime at batch 1 >= {GOAL:.0f}x faster than eager: {speedup:.1f}x, {verdict}"
        )


if __name__ == "__main__":
    main()
