"""ONNX runtimes besides onnxruntime, in which the tests run an export's files to check the
`runtimes` that each file's manifest entry names: each a function of the file's path that
returns one that takes a batch of inputs and gives the model's first output."""

import openvino
from onnx.reference import ReferenceEvaluator


def in_openvino(path):
    # float32 arithmetic, as the model's: on a CPU with bfloat16 instructions (avx512_bf16, AMX)
    # OpenVINO computes in bfloat16 unless told, and logits then move by about 1e-2.
    config = {"INFERENCE_NUM_THREADS": 1, "INFERENCE_PRECISION_HINT": "f32"}
    compiled = openvino.compile_model(str(path), "CPU", config)
    return lambda inputs: compiled(inputs)[0]


def in_reference_evaluator(path):
    evaluator = ReferenceEvaluator(str(path))
    return lambda inputs: evaluator.run(None, {"input": inputs})[0]


OTHER_RUNTIMES = {"openvino": in_openvino, "onnx.reference": in_reference_evaluator}
