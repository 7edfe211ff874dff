"""python predict.py model_path=<export dir> input=<path>: predictions with onnxruntime, without torch."""

from {{ cookiecutter.package }}.cli import predict

if __name__ == "__main__":
    predict()
