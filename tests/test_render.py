"""What the template renders: complete, clean, and exactly the files each choice calls for."""

import email
import email.policy
import email.utils
import json
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml
from conftest import render, run_in

CHOICES = [
    {"logger": "wandb", "license": "Apache-2.0", "python_version": "3.12"},
    {"logger": "mlflow", "license": "BSD-3-Clause", "python_version": "3.10"},
    {"logger": "csv", "license": "Proprietary", "python_version": "3.11"},
]
# Copied without rendering: GitHub's own ${{ }} expressions must survive.
RAW = {".github/workflows/ci.yaml"}


def files(project: Path) -> set[str]:
    return {str(path.relative_to(project)) for path in project.rglob("*") if path.is_file()}


def assert_clean(project: Path):
    for name in files(project) - RAW:
        text = (project / name).read_text()
        assert "{{" not in text and "{%" not in text, f"unrendered Jinja in {name}"
    lint = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "."],
        cwd=project,
        capture_output=True,
        text=True,
    )
    assert lint.returncode == 0, lint.stdout


@pytest.fixture(scope="module", params=CHOICES, ids=lambda choice: "-".join(choice.values()))
def choice_project(request, tmp_path_factory) -> tuple[dict, Path]:
    return request.param, render(tmp_path_factory.mktemp("choice"), **request.param)


@pytest.fixture(scope="module")
def fresh_default(tmp_path_factory) -> Path:
    """A default render no test runs anything in (the shared one gains logs and caches)."""
    return render(tmp_path_factory.mktemp("fresh"))


def test_default_render_holds_exactly_the_expected_files(fresh_default):
    expected = (Path(__file__).parent / "expected_tree.txt").read_text().split()
    assert sorted(files(fresh_default)) == [
        name.format(package="digit_classifier") for name in expected
    ]


def test_default_render_is_clean(fresh_default):
    assert_clean(fresh_default)
    assert not (fresh_default / "licenses").exists()
    assert (fresh_default / "LICENSE").read_text().startswith("MIT License")


def test_choice_render_is_clean_and_differs_only_where_the_choice_matters(
    choice_project, fresh_default
):
    choice, project = choice_project
    assert_clean(project)
    assert files(project) == files(fresh_default)
    changed = {
        name
        for name in files(project)
        if (project / name).read_bytes() != (fresh_default / name).read_bytes()
    }
    # README.md names the default logger; the Dockerfile builds on the chosen Python's image.
    assert changed <= {
        "LICENSE",
        "pyproject.toml",
        "configs/train.yaml",
        "README.md",
        "Dockerfile",
    }

    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    assert pyproject["project"]["requires-python"] == f">={choice['python_version']}"
    defaults = yaml.safe_load((project / "configs" / "train.yaml").read_text())["defaults"]
    assert {"logger": choice["logger"]} in defaults
    # Its README shows how to log with another logger than its default.
    readme = (project / "README.md").read_text().splitlines()
    (line,) = [line for line in readme if "instead of the default" in line]
    assert line.split("logger=")[1].split()[0] != choice["logger"]
    assert f"instead of the default, {choice['logger']};" in line


@pytest.mark.slow
def test_choice_render_logs_with_its_logger_and_passes_its_tests(choice_project, tmp_path):
    """What a choice changes, exercised: a short run logs with the chosen default logger, and
    the project's own config tests of what that default is part of pass: every logger option
    composed and built with it, and the option checks of export, predict and serve. The rest of
    its suite runs the same code whatever the choice (tests pick their logger themselves) and
    runs on the default render in test_suites.py."""
    choice, project = choice_project
    run_dir, log_dir = tmp_path / "run", tmp_path / "logs"
    overrides = ["debug=limit", "trainer.enable_progress_bar=false"]
    overrides += [f"hydra.run.dir={run_dir}", f"paths.log_dir={log_dir}"]
    result = run_in(project, "train.py", *overrides, env={"WANDB_MODE": "offline"}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((run_dir / "metrics.json").read_text())["test/acc"] > 0
    written = {"wandb": run_dir / "wandb", "mlflow": log_dir / "mlflow.db", "csv": run_dir / "csv"}
    assert written[choice["logger"]].is_dir() or written[choice["logger"]].is_file()

    # In one process (-n 0): a few quick tests, where each worker would import torch first.
    chosen = ["tests/test_configs.py", "-k", "logger or commands_options", "-n", "0"]
    suite = run_in(project, "-m", "pytest", "-q", "-p", "no:cacheprovider", *chosen)
    assert suite.returncode == 0, suite.stdout[-3000:]
    assert " passed" in suite.stdout and " failed" not in suite.stdout


@pytest.mark.slow
def test_the_typed_modules_type_check_and_a_type_error_in_one_fails(tmp_path):
    """mypy, as the render's pre-commit hook and CI run it, on the modules its pyproject lists;
    then on the same render with an error in one of them."""
    project = render(tmp_path / "render")
    listed = tomllib.loads((project / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    hooks = yaml.safe_load((project / ".pre-commit-config.yaml").read_text())["repos"][0]["hooks"]
    assert {"id": "mypy", "entry": "mypy", "pass_filenames": False}.items() <= next(
        hook for hook in hooks if hook["id"] == "mypy"
    ).items()

    def mypy():
        command = [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")]
        return subprocess.run(command, cwd=project, capture_output=True, text=True, timeout=900)

    # A listed folder is a package: mypy checks each of its modules.
    modules = [
        path
        for name in listed
        for path in ([project / name] if name.endswith(".py") else (project / name).glob("*.py"))
    ]
    clean = mypy()
    assert clean.returncode == 0, clean.stdout
    assert f"no issues found in {len(modules)} source files" in clean.stdout
    with open(project / listed[0], "a") as module:
        module.write('\n\ndef broken() -> int:\n    return "text"\n')
    broken = mypy()
    assert broken.returncode == 1
    assert f"{listed[0]}:" in broken.stdout and "[return-value]" in broken.stdout


def test_hostile_names_still_render_valid_python_and_toml(tmp_path):
    hostile = {
        "project_name": 'Tom\'s "Quoted" \\ Ünïcode Net',
        "description": 'Says "hi", \\n isn\'t a newline; {braces} and ümlauts',
        "author": 'O\'Brien "The Author" \\',
    }
    project = render(tmp_path, **hostile)
    assert project.name == "tom-s-quoted-unicode-net"
    for name in files(project):
        if name.endswith(".py"):
            compile((project / name).read_text(), name, "exec")
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    assert pyproject["project"]["description"] == hostile["description"]
    assert pyproject["project"]["authors"][0]["name"] == hostile["author"]
    assert hostile["project_name"] in (project / "README.md").read_text()
    assert_clean(project)


# Text that `tojson` would write as escapes TOML refuses, or that tools mishandle if anything on
# the way encodes it wrongly: each as the project's name, description and author.
UNICODE = {
    "emoji": "Rocket 🚀 and family 👩‍👩‍👧 (a ZWJ sequence)",
    "astral": "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𠀀 𓀀 beyond U+FFFF",
    "right-to-left": "מסווג ספרות مصنف الأرقام \u200f\u202eevil\u202c",
    "combining": "Ze\u0301phyr Z\u0324\u0354\u0367\u0311 n\u0303",
    "controls": 'tab\there, delete\x7f, quote " and backslash \\',
}


@pytest.mark.parametrize("text", UNICODE.values(), ids=UNICODE.keys())
def test_any_unicode_answer_renders_files_that_parse_and_a_project_pip_builds(text, tmp_path):
    project = render(tmp_path, project_name=text, description=text, author=text)
    parsers = {
        ".toml": tomllib.loads,
        ".json": json.loads,
        ".yaml": lambda text: list(yaml.safe_load_all(text)),
        ".yml": lambda text: list(yaml.safe_load_all(text)),
    }
    parsed = [name for name in files(project) if Path(name).suffix in parsers]
    for name in parsed:
        parsers[Path(name).suffix]((project / name).read_text())
    assert "pyproject.toml" in parsed and ".github/workflows/ci.yaml" in parsed
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    assert pyproject["project"]["description"] == text
    assert pyproject["project"]["authors"][0]["name"] == text
    assert text in (project / "README.md").read_text()

    # pip reads the metadata and the build backend writes it, unchanged, into a wheel.
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
         "--wheel-dir", str(tmp_path / "dist"), str(project)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
        metadata = email.message_from_bytes(archive.read(name), policy=email.policy.default)
    assert metadata["Summary"] == text
    assert email.utils.getaddresses([metadata["Author-email"]]) == [(text, "you@example.com")]
