"""The data path: how fast the datamodule's loader serves batches, and how long training waits.

    python benchmarks/data_path.py [--rounds 3] [--epochs 6] [--project DIR]

Batches per second over whole epochs of the training split (baselines.py loaders): the
project's datamodule loader, a per-sample TensorDataset + DataLoader on the same tensors, and
slicing the tensors by a shuffled index without any DataLoader (the floor). Then the share of
training time spent between batches (fetching the next one, plus Lightning's own bookkeeping
between steps) in a run of `python train.py`, measured by the benchmark's probe
(probes.EpochTimer) and by the project's own TrainingDiagnostics callback
(`perf/data_wait_frac`, read back from the CSV log).
"""

import argparse
import json
import tempfile
from pathlib import Path

from common import (
    PROJECT,
    add_arguments,
    logged_values,
    median,
    report,
    run_baseline,
    setup,
    train_with_probe,
)


def loader_rates(project: Path, scratch: Path) -> dict[str, float]:
    path = scratch / "loaders.json"
    run_baseline(project, "loaders", str(path))
    return json.loads(path.read_text())


def wait_fractions(project: Path, epochs: int, scratch: Path) -> tuple[float, float | None]:
    """(probe's median over steady epochs, diagnostics' median over its logging windows)."""
    scratch = Path(tempfile.mkdtemp(dir=scratch))  # a new run directory: nothing to auto-resume
    times, output = scratch / "times.json", scratch / "run"
    probe = train_with_probe(
        project, [*PROJECT, "logger=csv"], epochs, output, "EpochTimer", times
    )
    probe_frac = median(
        [w / t for w, t in zip(probe["wait"][1:], probe["train"][1:], strict=True)]
    )
    values = logged_values(output, "perf/data_wait_frac")
    return probe_frac, median(values) if values else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=6)
    add_arguments(parser)
    args = parser.parse_args()

    project = setup(args)
    rates, probe_fracs, diag_fracs = {}, [], []
    with tempfile.TemporaryDirectory(prefix="bench-data-") as scratch:
        for _ in range(args.rounds):
            for name, rate in loader_rates(project, Path(scratch)).items():
                rates.setdefault(name, []).append(rate)
            probe_frac, diag_frac = wait_fractions(project, args.epochs, Path(scratch))
            probe_fracs.append(probe_frac)
            if diag_frac is not None:
                diag_fracs.append(diag_frac)

    datamodule = median(rates["datamodule"])
    rows = [[name, median(values), median(values) / datamodule] for name, values in rates.items()]
    rows.append(
        ["time between training batches (probe), share of train time", median(probe_fracs), ""]
    )
    if diag_fracs:
        rows.append(["perf/data_wait_frac (TrainingDiagnostics)", median(diag_fracs), ""])
    report(
        "data_path",
        f"Data path: batches/s of the training split (batch size 64), median of {args.rounds} rounds",
        ["loader", "batches/s (or fraction)", "x datamodule"],
        rows,
        {
            "project": str(project),
            "batches_per_second": rates,
            "wait_fraction_probe": probe_fracs,
            "wait_fraction_diagnostics": diag_fracs,
        },
    )


if __name__ == "__main__":
    main()
