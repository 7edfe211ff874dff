"""Keeps what the chosen options need and says what to run next. Offline; no git."""

import shutil
from pathlib import Path

LICENSE = {{ cookiecutter.license | tojson }}
PROJECT = {{ cookiecutter.project | tojson }}


def keep_license(root: Path, choice: str) -> None:
    """The template carries every license text; the project keeps only the chosen one."""
    licenses = root / "licenses"
    shutil.move(licenses / choice, root / "LICENSE")
    shutil.rmtree(licenses)


if __name__ == "__main__":
    keep_license(Path.cwd(), LICENSE)
    print(f"\nCreated {PROJECT}. Next:\n")
    print(f"  cd {PROJECT}")
    print('  pip install -e ".[dev]"      # install CPU torch first on machines without a GPU')
    print("  python train.py\n")
