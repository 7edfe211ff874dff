"""Optimized: `model.optimized.onnx`, model.onnx as onnxruntime optimizes it, saved: operators
fused, constants folded, and for transformers attention, LayerNorm and GELU fused into single
kernels. The same function as fp32, checked element by element like it; it needs onnxruntime,
whose own operators (the com.microsoft domain: FusedConv, Attention, ...) it holds."""

from pathlib import Path

import onnx
import onnxruntime as ort

from ..files import staged
from .onnx_graph import drop_unused_opsets, fuse_transformer, new_operators, operators, runner
from .verify import Runner

FILE = "model.optimized.onnx"


def save_level_all(source: Path, path: Path) -> None:
    """What an onnxruntime session does to `source` at level ALL, written to `path`."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(path)
    # The NCHWc layout is blocked for this CPU's vector width: saved, the file would be right
    # only on this kind of CPU. A serving session at level ALL applies it when loading.
    ort.InferenceSession(
        str(source),
        options,
        providers=["CPUExecutionProvider"],
        disabled_optimizers=["NchwcTransformer"],
    )


def save(source: Path, path: Path, attention: tuple[int, int] | None) -> dict:
    """Optimizes `source`, model.onnx, into `path`: with onnxruntime's transformer optimizer for a
    transformer (`attention`: its heads and width), else at onnxruntime's level ALL. Returns what
    was fused, for the report."""
    with staged(path) as partial:
        if attention:
            how = {"optimizer": "transformer", **fuse_transformer(source, partial, *attention)}
        else:
            save_level_all(source, partial)
            how = {"optimizer": "level_all"}
        drop_unused_opsets(partial)
        onnx.checker.check_model(partial, full_check=True)
        how["fused_operators"] = new_operators(operators(source), operators(partial))
    return {"optimization": how}


def load(path: Path) -> Runner:
    return runner(path)
