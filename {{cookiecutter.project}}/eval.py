"""python eval.py ckpt_path=<checkpoint> [overrides]: tests a trained model (configs/eval.yaml)."""

from {{ cookiecutter.package }}.cli import evaluate

if __name__ == "__main__":
    evaluate()
