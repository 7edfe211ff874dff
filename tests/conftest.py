"""Renders the template the way users do and runs what it renders."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cookiecutter.main import cookiecutter

REPO = Path(__file__).parents[1]
# One torch thread per process that the tests start: the rendered projects train tiny models, and
# threads that compete for busy cores slow every step several times over.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def render(output_dir: Path, **context) -> Path:
    """Renders the template with `context` over the defaults, no prompts; returns the project."""
    project = cookiecutter(
        str(REPO), no_input=True, extra_context=context, output_dir=str(output_dir)
    )
    return Path(project)


def run_in(project: Path, *command: str, timeout: int = 600, env: dict | None = None):
    """Runs a command in a rendered project, its `src` importable as after `pip install -e .`.
    Not as a pytest-xdist worker, which this process may be: a suite it starts has its own."""
    inherited = {name: value for name, value in os.environ.items() if "XDIST" not in name}
    env = {**inherited, "PYTHONPATH": str(project / "src"), **(env or {})}
    return subprocess.run(
        [sys.executable, *command],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="session")
def default_project(tmp_path_factory) -> Path:
    """The default render, shared by tests that only read it or write below its logs/."""
    return render(tmp_path_factory.mktemp("default"))
