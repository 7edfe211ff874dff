"""Tools that nobody here wrote work on the template: pytest-cookies bakes every choice, ruff
passes at the repository's root and deptry finds every import of the rendered project declared."""

import json
import subprocess
import sys
import tomllib

import pytest
import yaml
from conftest import REPO, render

PROMPTS = {
    key: value
    for key, value in json.loads((REPO / "cookiecutter.json").read_text()).items()
    if not key.startswith("_")
}
CHOICES = [(key, value) for key, values in PROMPTS.items() if isinstance(values, list)
           for value in values]  # fmt: skip


@pytest.mark.parametrize(("key", "value"), CHOICES, ids=[f"{k}={v}" for k, v in CHOICES])
def test_pytest_cookies_bakes_every_choice(cookies, key, value):
    result = cookies.bake(extra_context={key: value}, template=str(REPO))
    assert result.exception is None, result.exception
    assert result.exit_code == 0 and result.context[key] == value
    project = result.project_path
    assert project.name == "digit-classifier"
    # The choice took effect where it matters.
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    defaults = yaml.safe_load((project / "configs" / "train.yaml").read_text())["defaults"]
    took_effect = {
        "python_version": pyproject["project"]["requires-python"] == f">={value}",
        "logger": {"logger": value} in defaults,
        "license": pyproject["project"]["license"].removeprefix("LicenseRef-") == value,
    }
    assert took_effect[key]


def test_every_choice_prompt_is_baked():
    assert {key for key, _ in CHOICES} == {"python_version", "logger", "license"}


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]])
def test_ruff_passes_at_the_repository_root(command):
    result = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "--no-cache", "."],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # It linted the repository's own Python: the extension and the tests, not nothing.
    listed = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--show-files", "."],
        cwd=REPO,
        capture_output=True,
        text=True,
    ).stdout
    assert "lightning_template_jinja.py" in listed and "test_tools.py" in listed
    assert "{{cookiecutter.project}}" not in listed  # Jinja; its render is linted apart


def test_deptry_finds_every_import_of_the_rendered_project_declared(tmp_path):
    project = render(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "deptry", "."], cwd=project, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No dependency issues found" in result.stdout + result.stderr
