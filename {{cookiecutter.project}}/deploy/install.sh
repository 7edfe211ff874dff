#!/bin/sh
# Installs serve.py without torch into the Python environment at $1 (a virtual environment's
# folder): deploy/serve-requirements.txt with $ONNXRUNTIME (onnxruntime, or onnxruntime-gpu for
# CUDA), then the project's package without its dependencies. The Dockerfile runs it, and so does
# test_container.py, in a new virtual environment. Run from the project's folder; needs uv.
set -eu
uv pip install --python "$1/bin/python" -r deploy/serve-requirements.txt "$ONNXRUNTIME"
uv pip install --python "$1/bin/python" --no-deps .
