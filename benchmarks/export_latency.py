"""Inference latency of the exported formats against eager PyTorch, and of the ONNX variants
(fp32, int8, optimized) of the CNN, the MLP and the transformer against each other.

    python benchmarks/export_latency.py [--batch-sizes 1 16 64 256] [--repeats 200] [--epochs 10]
                                        [--rounds 3] [--threads 1] [--project DIR]

Renders the default project and trains each network on the digits for `--epochs`. The CNN's
`export.py`, every format, times eager PyTorch, TorchScript, torch.export and onnxruntime in one
process, one after the other, on the same held-out batches: the median over `--repeats` calls
after warm-up, and a format's speed-up is eager time / format time (table 1), printed with
export.py's warning where it judged its timings too noisy to compare. Goal on CPU: onnxruntime
at batch 1 at least 3x faster than eager.

Each network's export of onnx, onnx_int8 and onnx_optimized gives the files' sizes and test
metrics (table 2). There every ONNX file is timed again at batch 1 and 64, each in a process of
its own that imports neither torch nor another session (in one process, what ran before moved
a file's time by up to 2.5x), `--rounds` times in alternating order, keeping the fastest.
Goals: the INT8 file at most 0.35x the size of model.onnx; the optimized transformer at least
1.3x faster than model.onnx at batch 64; INT8 latency as measured, faster or not.

Its processes keep glibc's allocator as it is (the numbers in benchmarks/README.md were measured
so): no --default-malloc here.
"""

import argparse
import importlib
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
from common import PACKAGE, add_arguments, project_env, python, report, run, setup, table

FORMATS = {"torchscript": "TorchScript", "torch_export": "torch.export", "onnx": "onnxruntime"}
GOAL = 3.0  # onnxruntime's speed-up over eager at batch 1
NETS = {"cnn": [], "mlp": ["model/net=mlp"], "transformer": ["model/net=transformer"]}
VARIANTS = {"fp32": "onnx", "int8": "onnx_int8", "optimized": "onnx_optimized"}
SIZE_GOAL = 0.35  # the INT8 file's size against model.onnx
FUSION_GOAL = 1.3  # the optimized transformer's speed-up over model.onnx at batch 64
TIMED_BATCHES = ["1", "64"]


def time_file(path: str, seconds: float = 1.0, blocks: int = 5) -> dict[str, float]:
    """{batch: ms} of one ONNX file in a session as predict opens it: the lowest of `blocks`
    block medians after warm-up, the time of a call that nothing else on the cores slowed."""
    onnx_session = importlib.import_module(f"{PACKAGE}.onnx_session")
    session = onnx_session.open_session(path)
    shape = session.get_inputs()[0].shape[1:]
    times = {}
    for batch in TIMED_BATCHES:
        inputs = np.random.default_rng(0).standard_normal([int(batch), *shape], np.float32)
        for _ in range(5):
            onnx_session.run(session, inputs)
        medians = []
        for _ in range(blocks):
            calls, start = [], time.perf_counter()
            while len(calls) < 5 or time.perf_counter() - start < seconds / blocks:
                begin = time.perf_counter()
                onnx_session.run(session, inputs)
                calls.append(time.perf_counter() - begin)
            medians.append(statistics.median(calls))
        times[batch] = 1000 * min(medians)
    return times


def time_isolated(files: dict[tuple, Path], env: dict, rounds: int) -> dict[tuple, dict]:
    """`time_file` of each file in a fresh process, `rounds` times, every other round in reverse
    order; the lowest of each."""
    best: dict[tuple, dict] = {}
    keys = list(files)
    for index in range(rounds):
        for key in keys if index % 2 == 0 else keys[::-1]:
            command = python(__file__, "--time-file", str(files[key]))
            output = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
            times = json.loads(output.stdout)
            fastest = best.get(key, times)
            best[key] = {batch: min(ms, fastest[batch]) for batch, ms in times.items()}
    return best


def train_and_export(project: Path, env: dict, folder: Path, net: str, args) -> Path:
    """Trains `net`, exports its best checkpoint (every format for the CNN, which table 1 times
    in-process; the ONNX variants for the others) and returns the export's folder."""
    train_dir, export_dir = folder / f"{net}-train", folder / f"{net}-export"
    train = [*NETS[net], f"trainer.max_epochs={args.epochs}", "logger=csv"]
    run(python("train.py", *train, f"hydra.run.dir={train_dir}"), project, env)
    formats = [*FORMATS, *VARIANTS.values()] if net == "cnn" else list(VARIANTS.values())
    export = [
        f"ckpt_path={train_dir / 'checkpoints' / 'best.ckpt'}",
        f"formats=[{','.join(dict.fromkeys(formats))}]",
        f"hydra.run.dir={export_dir}",
    ]
    if net == "cnn":
        export += [
            f"batch_sizes=[{','.join(map(str, args.batch_sizes))}]",
            f"latency.repeats={args.repeats}",
        ]
    else:  # only in table 2, which times the files on its own
        export.append("latency.repeats=5")
    run(python("export.py", *export), project, env)
    return export_dir


def formats_table(results: dict, args) -> tuple[list, list, float | None]:
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
    return headers, rows, speedup


def how(result: dict) -> str:
    """How a variant was made, in a few words."""
    if "quantization" in result:
        return result["quantization"]["method"]
    if "optimization" in result:
        fused = result["optimization"]["fused_operators"]
        return ", ".join(f"{op.split('.')[-1]} {n}" for op, n in fused.items()) or "nothing fused"
    return "as exported"


def variants_table(reports: dict, times: dict) -> tuple[list, list]:
    headers = ["network", "variant", "KiB", "x size", "metric", "drop", "max |diff|"]
    headers += [f"ms @ {b}" for b in TIMED_BATCHES] + [f"x fp32 @ {b}" for b in TIMED_BATCHES]
    rows = []
    for net, results in reports.items():
        fp32 = results["onnx"]
        for variant, name in VARIANTS.items():
            result = results[name]
            worst = max(check["max_abs_diff"] for check in result["parity"].values())
            ms = times[net, variant]
            rows.append(
                [
                    net,
                    f"{variant} ({how(result)})",
                    result["bytes"] / 1024,
                    result["bytes"] / fp32["bytes"],
                    next(iter(result["metric"].values())),
                    result.get("metric_drop", 0.0),
                    f"{worst:.2g}",
                    *(ms[b] for b in TIMED_BATCHES),
                    *(times[net, "fp32"][b] / ms[b] for b in TIMED_BATCHES),
                ]
            )
    return headers, rows


def verdicts(reports: dict, times: dict) -> list[str]:
    lines = []
    for net, results in reports.items():
        ratio = results["onnx_int8"]["bytes"] / results["onnx"]["bytes"]
        met = "met" if ratio <= SIZE_GOAL else "NOT met"
        lines.append(f"goal: {net} INT8 file <= {SIZE_GOAL}x fp32: {ratio:.3f}x, {met}")
    for net in reports:
        speed = {b: times[net, "fp32"][b] / times[net, "int8"][b] for b in TIMED_BATCHES}
        said = ", ".join(
            f"{x:.2f}x {'faster' if x > 1 else 'SLOWER'} at batch {b}" for b, x in speed.items()
        )
        lines.append(f"INT8 {net} against fp32: {said}")
    fused = times["transformer", "fp32"]["64"] / times["transformer", "optimized"]["64"]
    met = "met" if fused >= FUSION_GOAL else "NOT met"
    lines.append(
        f"goal: optimized transformer >= {FUSION_GOAL}x faster than fp32 at batch 64: "
        f"{fused:.2f}x, {met}"
    )
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--repeats", type=int, default=200, help="timed calls per format and size")
    parser.add_argument("--epochs", type=int, default=10, help="training epochs of each network")
    parser.add_argument("--rounds", type=int, default=3, help="isolated timings of each variant")
    parser.add_argument("--time-file", help=argparse.SUPPRESS)  # one file, in this process
    add_arguments(parser, steady_malloc=False)
    args = parser.parse_args()
    if args.time_file:
        print(json.dumps(time_file(args.time_file)))
        return

    project = setup(args)
    env = project_env(project)
    reports, files, noise = {}, {}, {}
    with tempfile.TemporaryDirectory(prefix="bench-export-") as scratch:
        for net in NETS:
            folder = train_and_export(project, env, Path(scratch), net, args)
            summary = json.loads((folder / "report.json").read_text())
            reports[net], noise[net] = summary["results"], summary["latency_warning"]
            formats = json.loads((folder / "manifest.json").read_text())["formats"]
            for variant, name in VARIANTS.items():
                files[net, variant] = folder / formats[name]["file"]
        times = time_isolated(files, env, args.rounds)

    headers, rows, speedup = formats_table(reports["cnn"], args)
    variant_headers, variant_rows = variants_table(reports, times)
    report(
        "export_latency",
        f"Inference latency, median of {args.repeats} calls per cell; x eager = speed-up over eager",
        headers,
        rows,
        {
            "results": reports["cnn"],
            "batch_sizes": args.batch_sizes,
            "repeats": args.repeats,
            "onnxruntime_speedup_at_batch_1": speedup,
            "goal": GOAL,
            # export.py's own judgement of its timings (None: worth comparing).
            "latency_warning": noise["cnn"],
            "variants": {
                "table": {"headers": variant_headers, "rows": variant_rows},
                "results": reports,
                "isolated_ms": {f"{net}/{variant}": ms for (net, variant), ms in times.items()},
                "rounds": args.rounds,
            },
        },
    )
    if noise["cnn"]:
        print(f"export.py: {noise['cnn']}")
    if speedup is not None:
        verdict = "met" if speedup >= GOAL else "NOT met"
        verdict += ", but see export.py's warning above" if noise["cnn"] else ""
        print(
            f"goal: onnxruntime at batch 1 >= {GOAL:.0f}x faster than eager: {speedup:.1f}x, {verdict}"
        )
    print(
        "\nONNX variants: size, test metric (drop in points), parity, and latency of each file "
        f"in a process of its own, fastest of {args.rounds}"
    )
    print(table(variant_headers, variant_rows))
    print("\n".join(verdicts(reports, times)))


if __name__ == "__main__":
    main()
