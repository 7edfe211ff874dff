"""python predict.py model=<export dir> input=<path>: onnxruntime predictions, no torch."""

from {{ cookiecutter.package }}.cli import predict

if __name__ == "__main__":
    predict()
