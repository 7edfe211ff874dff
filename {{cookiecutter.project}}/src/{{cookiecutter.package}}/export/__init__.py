"""Deployable copies of a trained network, each reloaded and checked against the original.

`task.export` runs it all; one module per format (`onnx`, `torchscript`, `torch_export`, and
those made from model.onnx: its variants `onnx_int8` and `onnx_optimized`, and `triton`, a model
repository for Triton Inference Server) saves and reloads its artifact;
`onnx_graph` holds what the ONNX formats share; `verify` measures parity, the task metric and
latency; `report` writes what an export leaves.
"""
