"""Triton: `triton/<package>/1/model.onnx` and `triton/<package>/config.pbtxt`, a model
repository that Triton Inference Server (or KServe's Triton runtime) serves as it is, with its
dynamic batcher. model.onnx is copied unchanged; config.pbtxt names its input and output with
the shapes and types of the ONNX graph. Triton feeds the model preprocessed tensors: the client
prepares them as manifest.json says (README.md, "Deploy")."""

import shutil
from pathlib import Path

import onnx

from .onnx_graph import runner
from .verify import Runner

# The model's name in Triton, as clients address it (/v2/models/<name>/infer): the package's.
NAME = __package__.split(".")[0]
# Triton's layout: a folder per model, holding its config and a folder per version.
FILE = f"triton/{NAME}/1/model.onnx"
# Triton's names of ONNX's element types, for those an export's graph holds.
TYPES = {
    onnx.TensorProto.FLOAT: "TYPE_FP32",
    onnx.TensorProto.FLOAT16: "TYPE_FP16",
    onnx.TensorProto.DOUBLE: "TYPE_FP64",
    onnx.TensorProto.INT64: "TYPE_INT64",
    onnx.TensorProto.INT32: "TYPE_INT32",
    onnx.TensorProto.BOOL: "TYPE_BOOL",
}


def save(source: Path, path: Path, max_batch_size: int, max_queue_delay_microseconds: int) -> dict:
    """Copies `source`, model.onnx, to `path` in a new model repository and writes its
    config.pbtxt; returns the config's settings, for the report."""
    path.parent.mkdir(parents=True)
    shutil.copyfile(source, path)
    graph = onnx.load(path, load_external_data=False).graph
    text = config(graph, max_batch_size, max_queue_delay_microseconds)
    (path.parents[1] / "config.pbtxt").write_text(text)
    return {
        "triton": {
            "model": NAME,
            "max_batch_size": max_batch_size,
            "max_queue_delay_microseconds": max_queue_delay_microseconds,
        }
    }


def config(graph: onnx.GraphProto, max_batch_size: int, delay: int) -> str:
    """config.pbtxt, in protobuf's text format, for the ONNX `graph`: its first dimension is the
    batch, which Triton leaves out of `dims`; a dimension of any size is -1."""
    tensors = {
        "input": "\n".join(tensor(value) for value in graph.input),
        "output": "\n".join(tensor(value) for value in graph.output),
    }
    return (
        f'name: "{NAME}"\n'
        'backend: "onnxruntime"\n'
        f"max_batch_size: {max_batch_size}\n"
        + "".join(f"{key} [\n{entries}\n]\n" for key, entries in tensors.items())
        + "dynamic_batching {\n"
        + f"  max_queue_delay_microseconds: {delay}\n"
        + "}\n"
    )


def tensor(value: onnx.ValueInfoProto) -> str:
    kind = value.type.tensor_type
    dims = [dim.dim_value if dim.HasField("dim_value") else -1 for dim in kind.shape.dim[1:]]
    return (
        "  {\n"
        f'    name: "{value.name}"\n'
        f"    data_type: {TYPES[kind.elem_type]}\n"
        f"    dims: [ {', '.join(map(str, dims))} ]\n"
        "  }"
    )


def load(path: Path) -> Runner:
    return runner(path)
