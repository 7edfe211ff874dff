"""INT8: `model.int8.onnx`, model.onnx with 8-bit weights, about a third of its size, in ONNX's own
operators, so that any ONNX runtime runs it. Its outputs differ from fp32 by design, so export
judges it by the task metric on the test split."""

import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import version_converter
from onnxruntime.quantization import (
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    QuantType,
    quant_pre_process,
    quantize_dynamic,
    quantize_static,
)

from ..files import staged
from ..onnx_session import INPUT_NAME
from .onnx_graph import STANDARD, drop_unused_opsets, operators, opset_domains, quiet, runner
from .verify import Runner

FILE = "model.int8.onnx"
CALIBRATION_BATCH = 64
# QuantizeLinear and DequantizeLinear as opset 19 defines them are the oldest versions that onnx's
# reference evaluator implements: a static quantization is written at this opset at least.
QDQ_OPSET = 19


class Samples(CalibrationDataReader):
    """Feeds calibration samples to onnxruntime's calibrator, a batch at a time."""

    def __init__(self, samples: np.ndarray):
        self.batches = iter(np.array_split(samples, -(-len(samples) // CALIBRATION_BATCH)))

    def get_next(self) -> dict | None:
        batch = next(self.batches, None)
        return None if batch is None else {INPUT_NAME: batch}


def save(source: Path, path: Path, calibration: Callable[[], np.ndarray]) -> dict:
    """Quantizes `source`, model.onnx, into `path`; returns how, for the report.

    A graph with convolutions is quantized statically, weights and activations, with activation
    ranges measured on `calibration()` (training samples), into QuantizeLinear and
    DequantizeLinear around the float operators; one of linear layers only dynamically: its
    weights, with activations quantized at run time from their own range (DynamicQuantizeLinear
    and MatMulInteger). A transformer is quantized unfused: onnxruntime's fused attention would
    become its own QAttention operator, which no other runtime implements.
    """
    with tempfile.TemporaryDirectory() as scratch, quiet(), staged(path) as partial:
        prepared = Path(scratch) / "prepared.onnx"
        # Shape inference and onnxruntime's basic rewrites (BatchNorm folded into Conv or Gemm),
        # which the quantizer expects, and without which it warns. They keep to ONNX's operators.
        # Again with auto_merge where that fails: a pretrained BERT slices its position table to
        # the text's tokens, which symbolic inference sees as min(positions, tokens) against
        # tokens and cannot complete; the two are one, as export takes at most max_length
        # tokens, which the positions cover.
        try:
            quant_pre_process(str(source), str(prepared))
        except Exception as error:  # onnxruntime raises a plain Exception for it
            if "Incomplete symbolic shape inference" not in str(error):
                raise
            quant_pre_process(str(source), str(prepared), auto_merge=True)
        if operators(prepared)["Conv"]:
            samples = calibration()
            at_least(prepared, QDQ_OPSET)
            quantize_static(
                str(prepared),
                str(partial),
                Samples(samples),
                quant_format=QuantFormat.QDQ,
                activation_type=QuantType.QInt8,
                weight_type=QuantType.QInt8,
                per_channel=True,
                calibrate_method=CalibrationMethod.MinMax,
            )
            how = {"method": "static", "calibration_samples": len(samples)}
        else:
            # Every type the quantizer supports would also include Conv and Gather.
            types = ["MatMul", "Gemm"]
            quantize_dynamic(
                str(prepared),
                str(partial),
                weight_type=QuantType.QInt8,
                op_types_to_quantize=types,
            )
            how = {"method": "dynamic", "quantized_operators": types}
        drop_unused_opsets(partial)
        onnx.checker.check_model(partial, full_check=True)
    return {"quantization": how}


def at_least(path: Path, opset: int) -> None:
    """Converts the file at `path` to ONNX's `opset` if it is at an older one."""
    if opset_domains(path)[STANDARD] < opset:
        onnx.save(version_converter.convert_version(onnx.load(path), opset), path)


def load(path: Path) -> Runner:
    return runner(path)
