"""What an export leaves besides the artifacts: manifest.json, report.json and a printed table."""

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import torch

from .. import kinds
from ..console import format_table
from ..contract import Artifact, Contract, Manifest, ManifestInput
from ..files import sha256
from ..onnx_session import INPUT_NAME, OUTPUT_NAME, VARIANTS
from .onnx_graph import opset_domains, runtimes

FORMAT_VARIANTS = {name: variant for variant, name in VARIANTS.items()}
# The JSON Schema of manifest.json, written beside it.
SCHEMA = "manifest.schema.json"
# Quantized: its outputs differ from fp32 by design, so the test metric judges it, not atol.
BY_METRIC = ("onnx_int8",)
# Latency figures worth comparing: from at least this many timed calls per cell, whose
# interquartile range stays within this share of their median, on a machine whose load average
# does not exceed its cores. Otherwise other processes set the times, and a ratio between two
# formats says nothing (one export measured eager 7494x slower than onnxruntime under load).
MIN_REPEATS = 10
MAX_SPREAD = 0.5


def checks(result: dict) -> list[dict]:
    """A format's parity checks: at each batch size, and on inputs cut shorter."""
    return [*result["parity"].values(), *result["parity_shorter"].values()]


def worst_diff(result: dict) -> float:
    return max(check["max_abs_diff"] for check in checks(result))


def describe(path: Path, root: Path, result: dict) -> Artifact:
    """A format's entry in manifest.json: its file (its path in the export at `root`), checksum
    and size, the ONNX variant it is with the opset domains and runtimes it needs, and how it
    measured: the test metric, its largest difference to eager, its latency."""
    return Artifact(
        file=path.relative_to(root).as_posix(),
        sha256=sha256(path),
        digest="",  # recorded once the manifest holds everything it covers: Manifest.sealed
        bytes=result["bytes"],
        test_metric=result["metric"],
        max_abs_diff=worst_diff(result),
        latency_ms=result["latency_ms"],
        variant=result.get("variant"),
        opset_domains=result.get("opset_domains"),
        runtimes=result.get("runtimes"),
    )


def manifest(
    files: dict[str, Path],
    results: dict[str, dict],
    contract: Contract,
    opset: int,
    checkpoint: Path,
    extra: dict[str, str],
    root: Path,
) -> Manifest:
    """What a runtime needs to feed the artifacts and read their outputs: the data contract of
    training (the input, its preprocessing, the task and its target: class names, or the target's
    name, units and standardization), the opset, each file in the export at `root` with its
    checksum and figures, and the `extra` files of the input kind with theirs."""
    sample = contract.input
    return Manifest(
        formats={name: describe(path, root, results[name]) for name, path in files.items()},
        task=contract.target.task,
        input=ManifestInput(
            name=INPUT_NAME,
            kind=sample.kind,
            shape=["batch", *kinds.model_shape(sample.kind, sample.shape)],
            dtype=sample.dtype,
        ),
        preprocessing=contract.preprocessing,
        output={"name": OUTPUT_NAME},
        target=contract.target,
        opset=opset if "onnx" in files else None,
        checkpoint={"path": str(checkpoint), "sha256": sha256(checkpoint)},
        files=extra,
        versions={
            "torch": torch.__version__,
            "onnx": onnx.__version__,
            "onnxruntime": onnxruntime.__version__,
        },
    ).sealed()


def facts(name: str, path: Path, results: dict[str, dict], sample: np.ndarray) -> dict:
    """What the report says of a format besides its measurements: its file's size; for an ONNX
    variant, which it is, the operator domains its file uses (with their versions) and the
    runtimes that run it (`sample`: an input to try it on); and for one judged by the metric,
    the points of it that it loses against model.onnx (hundredths of the metric: 0.5 is half a
    percentage point of accuracy, or 0.005 of R²; negative when it gains)."""
    about: dict = {"bytes": path.stat().st_size}
    if name in FORMAT_VARIANTS:
        domains = opset_domains(path)
        about |= {
            "variant": FORMAT_VARIANTS[name],
            "opset_domains": domains,
            "runtimes": runtimes(path, domains, sample),
        }
    if name in BY_METRIC:
        ((metric, fp32),) = results["onnx"]["metric"].items()
        about["metric_drop"] = 100 * (fp32 - results[name]["metric"][metric])
    return about


def failures(results: dict[str, dict], atol: float, max_metric_drop: float) -> list[str]:
    """One line for each format that fails its check: its logits differ from the eager model's by
    more than `atol`, or (a quantized format) it loses more than `max_metric_drop` points of the
    test metric against model.onnx."""
    lines = []
    for name, result in results.items():
        if name in BY_METRIC:
            if not result["metric_drop"] <= max_metric_drop:  # a NaN fails too
                ((metric, value),) = result["metric"].items()
                fp32 = results["onnx"]["metric"][metric]
                lines.append(
                    f"{name} loses {result['metric_drop']:.2f} points of {metric} against "
                    f"model.onnx ({fp32:.4f} -> {value:.4f}; max_metric_drop={max_metric_drop})"
                )
            continue
        where = {f"at batch size {size}": check for size, check in result["parity"].items()}
        where |= {f"cut to {cut}": check for cut, check in result["parity_shorter"].items()}
        lines += [
            f"{name} differs from the eager model by {check['max_abs_diff']:.3g} {place} "
            f"(atol={atol})"
            for place, check in where.items()
            if not check["max_abs_diff"] <= atol  # a NaN fails too
        ]
    return lines


def fastest(results: dict[str, dict]) -> dict[str, str]:
    """The fastest ONNX variant at each batch size, where the export holds more than one."""
    timed = {
        result["variant"]: result["latency_ms"]
        for result in results.values()
        if "variant" in result
    }
    if len(timed) < 2:
        return {}
    sizes = next(iter(timed.values()))
    return {size: min(timed, key=lambda variant: timed[variant][size]) for size in sizes}


def latency_warning(results: dict[str, dict], repeats: int, load: float, cores: int) -> str | None:
    """One line saying why the latency figures are too noisy to compare, if they are: too few
    repeats to tell, timings of a cell spread too wide, or a machine busier than its cores."""
    reasons = []
    if repeats < MIN_REPEATS:
        reasons.append(f"latency.repeats={repeats} is too few to tell (at least {MIN_REPEATS})")
    spreads = [
        (spread, name, size)
        for name, result in results.items()
        for size, spread in result["latency_spread"].items()
    ]
    spread, name, size = max(spreads)
    if repeats >= MIN_REPEATS and spread > MAX_SPREAD:
        reasons.append(
            f"the timings of {name} at batch {size} spread over {spread:.0%} of their median "
            f"(at most {MAX_SPREAD:.0%})"
        )
    if load > cores:
        reasons.append(f"the load average is {load:.1f} on {cores} cores")
    if not reasons:
        return None
    return (
        f"warning: latency too noisy to compare formats, speed-ups left out: {'; '.join(reasons)}"
        "; export again on a quieter machine, or with more latency.repeats"
    )


def table(
    results: dict[str, dict], files: dict[str, Path], root: Path, speedups: bool = True
) -> str:
    """Size, test metric, parity (the largest difference, and the task's own checks, such as
    argmax agreement) and latency per format, with each file's path in the export at `root`;
    each latency with its speed-up over eager, where `speedups`."""
    eager = results["eager"]["latency_ms"]
    metric = next(iter(results["eager"]["metric"]))
    names = [
        key for key in next(iter(results["eager"]["parity"].values())) if key != "max_abs_diff"
    ]
    headers = [
        "format",
        "file",
        "KiB",
        metric,
        "max |diff|",
        *(check.replace("_", " ") for check in names),
        *(f"ms @ batch {n}" for n in eager),
    ]
    rows = []
    for name, result in results.items():
        timings = [
            f"{ms:.3f} ({eager[n] / ms:.1f}x)" if speedups else f"{ms:.3f}"
            for n, ms in result["latency_ms"].items()
        ]
        worst = [min(each[check] for each in checks(result)) for check in names]
        file, size = (
            (files[name].relative_to(root).as_posix(), f"{result['bytes'] / 1024:.1f}")
            if name in files
            else ("-", "-")
        )
        rows.append(
            [
                name,
                file,
                size,
                f"{result['metric'][metric]:.4f}",
                f"{worst_diff(result):.2g}",
                *(f"{value:.1%}" for value in worst),
                *timings,
            ]
        )
    return format_table(headers, rows)
