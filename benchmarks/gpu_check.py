"""Trains the default project on one GPU in fp32, bf16-mixed and 16-mixed precision and under
`trainer=ddp` with one device, side by side in one run, and prints training throughput
(samples/s, measured after a warm-up epoch) and peak GPU memory of each. Then trains once more
with the default callbacks and reads the device memory the diagnostics logged
(`perf/gpu_mem_gb`, `perf/gpu_mem_peak_gb`) back from the run's metrics.csv.

    python benchmarks/gpu_check.py                 # needs a CUDA GPU
    python benchmarks/gpu_check.py --dry-run       # the same code path on CPU, without the
                                                   # GPU-only settings: checks the script itself

Each setting runs `python train.py` in a process of its own with the probe callback
`probes.ThroughputProbe`, and results go to results/gpu_check.json.
"""

import argparse
import csv
import sys
import tempfile
from pathlib import Path

import torch
from common import add_arguments, project_env, python, report, run, setup, train_with_probe

QUIET = [
    "logger=csv",
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "callbacks=none",
]
GPU = {
    "fp32": ["trainer=gpu", "trainer.precision=32-true"],
    "bf16-mixed": ["trainer=gpu", "trainer.precision=bf16-mixed"],
    "16-mixed": ["trainer=gpu", "trainer.precision=16-mixed"],
    "ddp, 1 device": ["trainer=ddp", "trainer.devices=1", "trainer.precision=32-true"],
}
MEMORY_METRICS = ["perf/gpu_mem_gb", "perf/gpu_mem_peak_gb"]
PROBE = "ThroughputProbe"  # in probes.py
# --dry-run: the CPU counterparts, so the script can be checked on a machine without a GPU.
CPU = {
    "fp32": ["trainer=cpu", "trainer.precision=32-true"],
    "bf16-mixed": ["trainer=cpu", "trainer.precision=bf16-mixed"],
    "ddp, 1 device": ["trainer=ddp_cpu", "trainer.devices=1"],
}


def logged_memory(metrics_csv: Path, dry_run: bool) -> dict:
    """The largest value of each device-memory metric in a run's metrics.csv. They are logged on
    CUDA only: a GPU run without them, or a CPU run with them, is an error."""
    rows = list(csv.DictReader(metrics_csv.open()))
    found = {
        name: max(float(row[name]) for row in rows if row.get(name))
        for name in MEMORY_METRICS
        if any(row.get(name) for row in rows)
    }
    if not any(row.get("perf/samples_per_sec") for row in rows):
        sys.exit(f"error: the diagnostics callback logged nothing to {metrics_csv}")
    if dry_run and found:
        sys.exit(f"error: a CPU run logged device memory: {found}")
    if not dry_run and (len(found) < len(MEMORY_METRICS) or min(found.values()) <= 0):
        sys.exit(f"error: expected positive {MEMORY_METRICS} in {metrics_csv}, found {found}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--epochs", type=int, default=6, help="epochs per setting, 1 is warm-up")
    parser.add_argument("--dry-run", action="store_true", help="CPU settings, 2 short epochs")
    args = parser.parse_args()
    if not args.dry_run and not torch.cuda.is_available():
        sys.exit("error: gpu_check needs a CUDA GPU; run it with --dry-run to check it on CPU")
    settings, epochs = (CPU, 2) if args.dry_run else (GPU, args.epochs)
    project = setup(args)
    rows, data = [], {}
    with tempfile.TemporaryDirectory() as scratch:
        short = ["+trainer.limit_train_batches=5"] if args.dry_run else []
        for name, overrides in settings.items():
            scratch_run = Path(scratch) / f"run{len(rows)}"
            out = Path(scratch) / f"{len(rows)}.json"
            overrides = [*QUIET, *overrides, *short]
            data[name] = train_with_probe(project, overrides, epochs, scratch_run, PROBE, out)
            memory = data[name]["peak_memory_mib"]
            rows.append([name, data[name]["samples_per_s"], "n/a" if memory is None else memory])
            # Printed now too, so that the output keeps it if a later setting fails.
            print(f"{name}: {rows[-1][1]:.0f} samples/s, peak {rows[-1][2]} MiB", flush=True)
        # The default callbacks (diagnostics among them), logging every 10 steps.
        tracked = Path(scratch) / "tracked"
        accelerator = settings["fp32"][0]
        command = ["train.py", "logger=csv", accelerator, "trainer.max_epochs=2", *short]
        run(python(*command, f"hydra.run.dir={tracked}"), project, project_env(project))
        memory_logged = logged_memory(tracked / "csv" / "metrics.csv", args.dry_run)
    print("device memory logged by the diagnostics callback (GB, largest value):", memory_logged)
    device = "CPU (dry run)" if args.dry_run else torch.cuda.get_device_name()
    report(
        "gpu_check_dry_run" if args.dry_run else "gpu_check",
        f"Training the default model on {device}, {epochs} epochs per setting",
        ["setting", "samples/s", "peak memory (MiB)"],
        rows,
        {"epochs": epochs, "device": device, "settings": data, "logged_memory_gb": memory_logged},
    )


if __name__ == "__main__":
    main()
