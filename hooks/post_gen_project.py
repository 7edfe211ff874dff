"""Keeps what the chosen options need and says what to run next. Offline; no git."""

import re
import shutil
import tempfile
from pathlib import Path

LICENSE = {{ cookiecutter.license | tojson }}
PROJECT = {{ cookiecutter.project | tojson }}


def keep_license(root: Path, choice: str) -> None:
    """The template carries every license text; the project keeps only the chosen one."""
    licenses = root / "licenses"
    shutil.move(licenses / choice, root / "LICENSE")
    shutil.rmtree(licenses)


def rendered_to_compare(root: Path) -> bool:
    """Whether `root` is a render that `cruft update` or `cruft diff` compares with the project
    and then deletes: cruft renders into a folder of its own that `tempfile` names tmp<8
    characters> in the temporary directory; `cruft create` and cookiecutter render where the
    user asked."""
    folder = root.resolve().parent
    return (
        folder.parent == Path(tempfile.gettempdir()).resolve()
        and re.fullmatch(r"tmp[a-z0-9_]{8}", folder.name) is not None
    )


if __name__ == "__main__":
    keep_license(Path.cwd(), LICENSE)
    if not rendered_to_compare(Path.cwd()):
        print(f"\nCreated {PROJECT}. Next:\n")
        print(f"  cd {PROJECT}")
        print('  pip install -e ".[dev]"      # install CPU torch first on machines without a GPU')
        print("  python train.py\n")
