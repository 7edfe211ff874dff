"""What an export leaves besides the artifacts: manifest.json, report.json and a printed table."""

from pathlib import Path

import onnx
import onnxruntime
import torch

from ..console import format_table
from ..files import sha256
from ..onnx_session import INPUT_NAME, OUTPUT_NAME


def manifest(files: dict[str, Path], contract: dict, opset: int, checkpoint: Path) -> dict:
    """What a runtime needs to feed the artifacts and read their outputs: the data contract of
    training (the input, its preprocessing, the task and its target: class names, or the target's
    name, units and standardization), the opset and checksums."""
    return {
        "formats": {name: {"file": p.name, "sha256": sha256(p)} for name, p in files.items()},
        "task": contract["target"]["task"],
        "input": {
            "name": INPUT_NAME,
            **contract["input"],
            "shape": ["batch", *contract["input"]["shape"]],
        },
        "preprocessing": contract["preprocessing"],
        "output": {"name": OUTPUT_NAME},
        "target": contract["target"],
        "opset": opset if "onnx" in files else None,
        "checkpoint": {"path": str(checkpoint), "sha256": sha256(checkpoint)},
        "versions": {
            "torch": torch.__version__,
            "onnx": onnx.__version__,
            "onnxruntime": onnxruntime.__version__,
        },
    }


def failures(results: dict[str, dict], atol: float) -> list[str]:
    """One line for each format whose logits differ from the eager model's by more than `atol`."""
    return [
        f"{name} differs from the eager model by {check['max_abs_diff']:.3g} "
        f"at batch size {size} (atol={atol})"
        for name, result in results.items()
        for size, check in result["parity"].items()
        if not check["max_abs_diff"] <= atol  # a NaN fails too
    ]


def table(results: dict[str, dict], files: dict[str, Path]) -> str:
    """Parity and latency per format; each latency with its speed-up over eager PyTorch."""
    eager = results["eager"]["latency_ms"]
    headers = ["format", "file", "max |diff|", "argmax agree", *(f"ms @ batch {n}" for n in eager)]
    rows = []
    for name, result in results.items():
        checks = result["parity"].values()
        timings = [f"{ms:.3f} ({eager[n] / ms:.1f}x)" for n, ms in result["latency_ms"].items()]
        worst_diff = max(check["max_abs_diff"] for check in checks)
        worst_agreement = min(check["argmax_agreement"] for check in checks)
        file = files[name].name if name in files else "-"
        rows.append([name, file, f"{worst_diff:.2g}", f"{worst_agreement:.1%}", *timings])
    return format_table(headers, rows)
