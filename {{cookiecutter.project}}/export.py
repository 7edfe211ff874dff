"""python export.py ckpt_path=<checkpoint>: verified ONNX, TorchScript and torch.export files."""

from {{ cookiecutter.package }}.cli import export_model

if __name__ == "__main__":
    export_model()
