"""Deployable copies of a trained network, each reloaded and checked against the original.

`task.export` runs it all; one module per format (`onnx`, `torchscript`, `torch_export`) saves and
reloads its artifact; `verify` measures parity and latency; `report` writes what an export leaves.
"""
