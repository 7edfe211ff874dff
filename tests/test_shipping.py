"""The generated project ships like a real one: wheel and console scripts (the walk from training
to predictions, once), hooks, CI, license."""

import datetime
import json
import os
import re
import site
import socket
import subprocess
import sys
import sysconfig
import time
import tomllib
import urllib.request
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import REPO, render
from packaging.licenses import canonicalize_license_expression
from sklearn.datasets import load_digits

WORKFLOW = Path(".github/workflows/ci.yaml")
# The console scripts, each named <project>-<task>.
TASKS = ["eval", "export", "optimize", "predict", "serve", "train"]
FORMATS = {"onnx": "model.onnx", "torchscript": "model.ts", "torch_export": "model.pt2"}
# The test's own tools (ruff, pre-commit, the hook scripts) come first on PATH, as in an
# activated environment; PYTHONPATH is dropped so nothing is imported from a source tree.
TOOLS_ENV = {
    **{key: value for key, value in os.environ.items() if key != "PYTHONPATH"},
    "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
}


def read(path: Path):
    return json.loads(path.read_text())


def run(*command, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(
        command, cwd=cwd, env=env or TOOLS_ENV, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
    return result


def fresh_venv(path: Path) -> Path:
    """A venv that sees this environment's packages (torch & co.) but has its own site-packages."""
    run(sys.executable, "-m", "venv", "--without-pip", str(path), cwd=path.parent)
    own = Path(sysconfig.get_path("purelib", "venv", vars={"base": str(path)}))
    # Listed after the venv's own site-packages, so the installed wheel wins over anything here.
    (own / "parent_env.pth").write_text("\n".join(site.getsitepackages()))
    return path / "bin" / "python"


@pytest.mark.slow
def test_wheel_runs_every_console_script_with_packaged_configs(default_project, tmp_path):
    run(sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path),
        cwd=default_project)  # fmt: skip
    (wheel,) = tmp_path.glob("digit_classifier-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(f"{wheel.name.split('-')[0]}-0.1.0.dist-info/METADATA").decode()
        assert "digit_classifier/configs/train.yaml" in archive.namelist()
        assert "digit_classifier/page.html" in archive.namelist()  # what serve shows at /
    assert "License-Expression: MIT" in metadata.splitlines()

    python = fresh_venv(tmp_path / "venv")
    run(sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
        "--no-index", "--quiet", str(wheel), cwd=tmp_path)  # fmt: skip
    scripts = tomllib.loads((default_project / "pyproject.toml").read_text())["project"]["scripts"]
    bin_dir = python.parent
    # Named after the project: `eval` and `export` alone would be shell builtins.
    assert sorted(scripts) == [f"digit-classifier-{task}" for task in TASKS]
    assert all((bin_dir / name).is_file() for name in scripts)

    # Far from the project: only the wheel's own code and configs can make these runs work.
    work = tmp_path / "work"
    work.mkdir()
    where = "from digit_classifier import cli; print(cli.__file__); print(cli.config_dir())"
    module, configs = run(str(python), "-c", where, cwd=work).stdout.split()
    assert Path(module).is_relative_to(tmp_path / "venv")
    assert Path(configs).is_relative_to(tmp_path / "venv")

    # The path to deployment as users walk it: train, eval, export every format, predict, serve.
    script = {name.rsplit("-", 1)[1]: str(bin_dir / name) for name in scripts}
    run(script["train"], "trainer.max_epochs=3", "logger=csv", cwd=work)
    (best,) = (work / "logs").rglob("best.ckpt")  # runs land below the working directory
    assert "test/acc" in read(best.parents[1] / "metrics.json")

    eval_dir, export_dir, predict_dir = work / "eval", work / "export", work / "predict"
    run(script["eval"], f"ckpt_path={best}", f"hydra.run.dir={eval_dir}", cwd=work)
    assert 0 <= read(eval_dir / "metrics.json")["test/acc"] <= 1

    # latency.repeats: timing is the benchmark's job; this checks that it is reported.
    export = run(script["export"], f"ckpt_path={best}", "latency.repeats=5",
                 f"hydra.run.dir={export_dir}", cwd=work)  # fmt: skip
    report, manifest = read(export_dir / "report.json"), read(export_dir / "manifest.json")
    assert report["passed"] and set(report["results"]) == {"eager", *FORMATS}
    assert {name: entry["file"] for name, entry in manifest["formats"].items()} == FORMATS
    assert any(line.split()[:2] == ["onnx", "model.onnx"] for line in export.stdout.splitlines())
    # torch.jit's deprecation is acknowledged in exactly one line: not hidden, not once per call.
    output = (export.stdout + export.stderr).splitlines()
    assert len([line for line in output if "torch.jit" in line]) == 1

    digits = load_digits()
    np.save(work / "digits.npy", digits.images[-50:])  # raw values, 0..16, as the dataset has
    predict = run(script["predict"], f"model={export_dir}", f"input={work / 'digits.npy'}",
                  f"hydra.run.dir={predict_dir}", cwd=work)  # fmt: skip
    assert "digits.npy[49]" in predict.stdout  # the printed table
    predictions = read(predict_dir / "predictions.json")["predictions"]
    labels = [int(prediction["class"]) for prediction in predictions]
    assert np.mean(np.array(labels) == digits.target[-50:]) >= 0.85

    # Serve the export: the server answers as predict did, and SIGTERM stops it.
    port = free_port()
    command = [script["serve"], f"model={export_dir}", f"port={port}", "hydra.run.dir=serve"]
    server = subprocess.Popen(command, cwd=work, env=TOOLS_ENV)
    try:
        wait_for(f"http://127.0.0.1:{port}/health", server)
        body = json.dumps({"inputs": digits.images[-50:].tolist()}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/predict", data=body,
                                         headers={"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(request, timeout=60) as answer:
            served = json.loads(answer.read())["predictions"]
        assert served == [{key: p[key] for key in ("class", "probability")} for p in predictions]
    finally:
        server.terminate()
        assert server.wait(timeout=60) == 0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(url: str, server: subprocess.Popen, timeout: float = 120) -> None:
    """Until `url` answers 200: the server's workers are set up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and server.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:  # refused, or 503 while the workers set up
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer (the server's status: {server.poll()})")


def test_pre_commit_hooks_pass_offline_on_a_fresh_render(tmp_path):
    project = render(tmp_path)
    run("git", "init", "--quiet", cwd=project)
    run("git", "add", "--all", cwd=project)
    env = {**TOOLS_ENV, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home")}
    output = run(sys.executable, "-m", "pre_commit", "run", "--all-files", cwd=project, env=env)
    config = yaml.safe_load((project / ".pre-commit-config.yaml").read_text())
    hooks = [hook["name"] for repo in config["repos"] for hook in repo["hooks"]]
    results = [line for line in output.stdout.splitlines() if line.startswith(tuple(hooks))]
    # Each hook ran on files and passed: "Skipped" (no files matched) would prove nothing.
    assert len(results) == len(hooks) and all(line.endswith("Passed") for line in results)
    # and changed nothing: the working tree still matches what was staged before the hooks ran.
    assert run("git", "diff", "--name-only", cwd=project).stdout == ""


def test_workflow_is_copied_verbatim_and_runs_lint_and_tests(default_project):
    text = (default_project / WORKFLOW).read_text()
    assert text == (REPO / "{{cookiecutter.project}}" / WORKFLOW).read_text()
    assert "${{ matrix.python }}" in text

    workflow = yaml.safe_load(text)
    jobs = workflow["jobs"]
    # A hung step ends within the job's limit (GitHub's default is 6 hours), and a new push to a
    # pull request cancels the run it replaces.
    assert all(0 < job["timeout-minutes"] <= 60 for job in jobs.values())
    assert workflow["concurrency"] == {
        "group": "${{ github.workflow }}-${{ github.ref }}",
        "cancel-in-progress": "${{ github.event_name == 'pull_request' }}",
    }
    matrix = jobs["test"]["strategy"]["matrix"]
    assert matrix["python"] == "${{ fromJSON(needs.versions.outputs.python) }}"
    steps = jobs["test"]["steps"]
    (setup,) = [step for step in steps if step.get("uses", "").startswith("actions/setup-python")]
    assert setup["with"] == {
        "python-version": "${{ matrix.python }}",
        "cache": "pip",
        "cache-dependency-path": "pyproject.toml",
    }
    commands = [line.strip() for step in steps for line in step.get("run", "").splitlines()]
    cpu_torch = "pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu"
    # CPU torch first (and the torchvision LitData requires, built for it), so installing the
    # project finds both satisfied and adds no CUDA build.
    assert commands.index(cpu_torch) < commands.index('pip install -e ".[dev]"')
    assert commands[-2:] == ["pre-commit run --all-files --show-diff-on-failure", "pytest"]


def test_workflow_passes_zizmor_with_actions_pinned_by_commit(default_project):
    workflow = default_project / WORKFLOW
    audit = subprocess.run(
        ["zizmor", "--offline", "--format=json", str(workflow)],
        env=TOOLS_ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    findings = json.loads(audit.stdout)  # not JSON if zizmor could not audit the file
    severities = [finding["determinations"]["severity"] for finding in findings]
    assert "High" not in severities, audit.stdout
    # zizmor wants a commit; people reading the workflow want the release it is.
    uses = re.findall(r"uses: (.*)", workflow.read_text())
    pinned = re.compile(r"[\w-]+/[\w-]+@[0-9a-f]{40} # v\d+\.\d+\.\d+")
    assert uses and all(pinned.fullmatch(action) for action in uses), uses


@pytest.mark.parametrize(
    ("python_version", "matrix"),
    [
        ("3.10", ["3.10", "3.11", "3.12", "3.13"]),
        ("3.11", ["3.11", "3.12", "3.13"]),
        ("3.12", ["3.12", "3.13"]),
    ],
)
def test_python_version_sets_requires_python_ruff_target_and_ci_matrix(
    tmp_path, python_version, matrix
):
    project = render(tmp_path, python_version=python_version)
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    assert pyproject["project"]["requires-python"] == f">={python_version}"
    assert pyproject["tool"]["ruff"]["target-version"] == f"py{python_version.replace('.', '')}"

    # Run the workflow's own step that builds the matrix, as the runner would.
    (step,) = [s for s in yaml.safe_load((project / WORKFLOW).read_text())["jobs"]["versions"]
               ["steps"] if s.get("id") == "read"]  # fmt: skip
    output = tmp_path / "github_output"
    env = {**TOOLS_ENV, "GITHUB_OUTPUT": str(output)}
    run("bash", "-e", "-c", step["run"], cwd=project, env=env)
    assert output.read_text() == f"python={json.dumps(matrix)}\n"


LICENSES = {
    "MIT": ("MIT", "MIT License"),
    "Apache-2.0": ("Apache-2.0", "Apache License"),
    "BSD-3-Clause": ("BSD-3-Clause", "BSD 3-Clause License"),
    "Proprietary": ("LicenseRef-Proprietary", "Copyright (c)"),
}


@pytest.mark.parametrize("choice", LICENSES)
def test_license_choice_sets_license_file_and_metadata(tmp_path, choice):
    expression, first_line = LICENSES[choice]
    project = render(tmp_path, license=choice, author="Ada Lovelace")
    text = (project / "LICENSE").read_text()
    assert text.lstrip().startswith(first_line)
    assert f"{datetime.datetime.now(datetime.UTC).year} Ada Lovelace" in text
    assert not (project / "licenses").exists()
    metadata = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    assert metadata["license"] == expression == canonicalize_license_expression(expression)
    assert metadata["license-files"] == ["LICENSE"]
