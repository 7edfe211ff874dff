"""INT8: `model.int8.onnx`, model.onnx with 8-bit weights, about a third of its size. Its outputs
differ from fp32 by design, so export judges it by the task metric on the test split."""

import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
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
from .onnx_graph import fuse_transformer, operators, quiet, runner
from .verify import Runner

FILE = "model.int8.onnx"
CALIBRATION_BATCH = 64


class Samples(CalibrationDataReader):
    """Feeds calibration samples to onnxruntime's calibrator, a batch at a time."""

    def __init__(self, samples: np.ndarray):
        self.batches = iter(np.array_split(samples, -(-len(samples) // CALIBRATION_BATCH)))

    def get_next(self) -> dict | None:
        batch = next(self.batches, None)
        return None if batch is None else {INPUT_NAME: batch}


def save(
    source: Path,
    path: Path,
    calibration: Callable[[], np.ndarray],
    attention: tuple[int, int] | None,
) -> dict:
    """Quantizes `source`, model.onnx, into `path`; returns how, for the report.

    A graph with convolutions is quantized statically, weights and activations, with activation
    ranges measured on `calibration()` (training samples); one of linear layers only dynamically:
    its weights, with activations quantized at run time from their own range. A transformer
    (`attention`: its heads and width) is fused first, so its attention is quantized whole.
    """
    with tempfile.TemporaryDirectory() as scratch, quiet(), staged(path) as partial:
        prepared = Path(scratch) / "prepared.onnx"
        if attention:
            fuse_transformer(source, prepared, *attention)
            source = prepared
        # Shape inference and onnxruntime's basic rewrites (BatchNorm folded into Conv or Gemm),
        # which the quantizer expects, and without which it warns.
        quant_pre_process(str(source), str(prepared))
        if operators(prepared)["Conv"]:
            samples = calibration()
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
            types = ["MatMul", "Gemm", *(["Attention"] if attention else [])]
            quantize_dynamic(
                str(prepared),
                str(partial),
                weight_type=QuantType.QInt8,
                op_types_to_quantize=types,
            )
            how = {"method": "dynamic", "quantized_operators": types}
        onnx.checker.check_model(partial, full_check=True)
    return {"quantization": how}


def load(path: Path) -> Runner:
    return runner(path)
