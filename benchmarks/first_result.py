"""Time to first result: render, install, train and export the default project, each timed.

    python benchmarks/first_result.py [--threads N]

Render runs `cookiecutter --no-input`. Install creates a fresh virtual environment that sees this
environment's packages (as a warm pip cache or a preinstalled image would provide them) and runs
`pip install -e .`, so it measures the project's own install, not downloading torch. Train runs
`python train.py` with every default (progress bar included, test of the best checkpoint
included); export runs `python export.py ckpt_path=<best.ckpt>` where the render has export.py.
"""

import argparse
import json
import site
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, add_arguments, report, run, setup


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args()
    args.project = None  # always a fresh render: rendering is one of the stages
    setup(args)

    stages: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-first-") as scratch:
        scratch = Path(scratch)
        stages["render (cookiecutter --no-input)"] = run(
            [sys.executable, "-m", "cookiecutter", "--no-input", "-o", str(scratch), str(REPO)],
            scratch,
        )
        project = next(path for path in scratch.iterdir() if (path / "train.py").is_file())

        venv = scratch / "venv"
        start = time.perf_counter()
        run([sys.executable, "-m", "venv", "--without-pip", str(venv)], scratch)
        venv_site = next(venv.glob("lib/python*/site-packages"))
        (venv_site / "shared.pth").write_text("\n".join(site.getsitepackages()) + "\n")
        venv_python = str(venv / "bin" / "python")
        run([venv_python, "-m", "pip", "install", "-e", "."], project)
        stages["install (pip install -e ., dependencies present)"] = time.perf_counter() - start

        run_dir = scratch / "train-run"
        stages["train (python train.py, defaults)"] = run(
            [venv_python, "train.py", f"hydra.run.dir={run_dir}"], project
        )
        metrics = json.loads((run_dir / "metrics.json").read_text())
        if (project / "export.py").is_file():
            stages["export (python export.py ckpt_path=best.ckpt)"] = run(
                [
                    venv_python,
                    "export.py",
                    f"ckpt_path={run_dir / 'checkpoints' / 'best.ckpt'}",
                    f"hydra.run.dir={scratch / 'export-run'}",
                ],
                project,
            )
    stages["total"] = sum(stages.values())
    report(
        "first_result",
        "Time to first result: seconds per stage of the default project",
        ["stage", "seconds"],
        [[name, value] for name, value in stages.items()],
        {"stages": stages, "test_acc": metrics.get("test/acc")},
    )


if __name__ == "__main__":
    main()
