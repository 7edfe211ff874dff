"""python train.py [overrides]: trains the model configured in configs/train.yaml."""

from {{ cookiecutter.package }}.cli import train

if __name__ == "__main__":
    train()
