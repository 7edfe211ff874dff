"""ONNX Runtime sessions, as export verifies them and predict and serve run them. No torch."""

from pathlib import Path

import numpy as np
import onnxruntime as ort

# The names export.py gives the graph's input and output.
INPUT_NAME = "input"
OUTPUT_NAME = "logits"
# The ONNX files an export may hold, by the name predict and serve choose them with, and the
# format that writes each (export.py's `formats`).
VARIANTS = {"fp32": "onnx", "int8": "onnx_int8", "optimized": "onnx_optimized"}


def open_session(path: str | Path, threads: int = 0) -> ort.InferenceSession:
    """A session with every graph optimization; `threads` per operator, 0 for one per core."""
    providers = ort.get_available_providers()
    if "CUDAExecutionProvider" in providers and hasattr(ort, "preload_dlls"):  # 1.21 and later
        # onnxruntime-gpu loads CUDA and cuDNN from their pip packages (its cuda and cudnn extras,
        # as the container's CUDA build installs them) only when asked: torch would have.
        ort.preload_dlls()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    return ort.InferenceSession(str(path), options, providers=providers)


def run(session: ort.InferenceSession, inputs: np.ndarray) -> np.ndarray:
    """The model's first output for a float32 batch."""
    return session.run(None, {session.get_inputs()[0].name: inputs})[0]
