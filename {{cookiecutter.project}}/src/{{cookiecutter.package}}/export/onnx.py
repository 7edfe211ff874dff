"""ONNX: one self-contained `model.onnx`, for onnxruntime and every runtime that reads ONNX."""

import logging
from pathlib import Path

import onnx
import torch

from ..files import staged
from ..onnx_session import INPUT_NAME, OUTPUT_NAME
from ..upstream import ONNX_EXPORT_LOGGERS
from .onnx_graph import runner, strip_node_metadata
from .verify import Runner

FILE = "model.onnx"


def save(
    net: torch.nn.Module, example: torch.Tensor, path: Path, dynamic_shapes: tuple, opset: int
) -> None:
    for name, level in ONNX_EXPORT_LOGGERS.items():
        logging.getLogger(name).setLevel(level)
    with staged(path) as partial:
        # The dynamo exporter (torch.export underneath). Weights stay inside the file, which
        # protobuf allows up to 2 GB; larger models need external_data=True and its side file.
        torch.onnx.export(
            net,
            (example,),
            partial,
            dynamo=True,
            opset_version=opset,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_shapes=dynamic_shapes,
            external_data=False,
            verbose=False,
        )
        strip_node_metadata(partial)
        onnx.checker.check_model(partial, full_check=True)


def load(path: Path) -> Runner:
    return runner(path)
