"""The template's Jinja extension (lightning_template_jinja.py) at work in real cookiecutter runs:
a project folder name that cannot be one and an answer that would run code are refused in one
line before anything is created, and the derived answers still render."""

import json
import re
import subprocess
import sys

import pytest
from conftest import REPO, render

import lightning_template_jinja as extension


def cookiecutter_cli(cwd, *answers: str) -> subprocess.CompletedProcess:
    """`cookiecutter --no-input <template> KEY=VALUE...` as a user types it, writing into cwd."""
    command = [sys.executable, "-m", "cookiecutter", "--no-input", str(REPO), *answers]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)


def assert_refused_in_one_line(result, message: str) -> str:
    """The refusal is all the run prints, exit status 1; returns the line."""
    assert result.returncode == 1, result.stdout + result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and message in line, line
    assert result.stdout == ""
    return line


@pytest.mark.parametrize(
    ("project", "message", "suggestion"),
    [
        ("a/b", "project 'a/b' holds '/', which a folder name cannot hold", "a-b"),
        ("a\\b", "holds '\\\\', which a folder name cannot hold", "a-b"),
        ("x/..", "holds '/'", "x"),
        ("..", "project '..' would be the output folder or its parent", "my-project"),
        ("a:b", "holds ':'", "a-b"),
        ("digits\n", "project 'digits\\n' holds '\\n'", "digits"),
        ("a" * 300, f"project '{'a' * 30}...' is 300 bytes, over the 255", "a" * 64),
        ("é" * 128, "is 256 bytes, over the 255 a folder name may have", "my-project"),
    ],
)
def test_a_project_that_cannot_be_a_folder_is_refused_before_anything_is_created(
    project, message, suggestion, tmp_path
):
    # Into a new folder beside work of the user's: cookiecutter would create the new folder and,
    # for `..`, delete its parent with the work when the pre-gen hook refused the name.
    (tmp_path / "work.txt").write_text("mine")
    result = cookiecutter_cli(tmp_path, f"project={project}", "-o", str(tmp_path / "new"))
    line = assert_refused_in_one_line(result, message)
    assert line.endswith(f"; try project={suggestion!r}")
    assert [path.name for path in tmp_path.iterdir()] == ["work.txt"]
    # The suggested name renders.
    assert render(tmp_path / "out", project=suggestion).name == suggestion


def test_the_longest_project_a_folder_can_have_renders(tmp_path):
    assert render(tmp_path, project="a" * 255, package="digits").name == "a" * 255


def test_a_long_project_name_derives_a_project_that_renders(tmp_path):
    name = "A Classifier Of Handwritten Digits " * 12  # 420 characters
    project = render(tmp_path, project_name=name)
    assert len(project.name) == extension.DERIVED_MAX
    assert project.name.startswith("a-classifier-of-handwritten-digits-a-")
    assert (project / "src" / project.name.replace("-", "_") / "cli.py").is_file()
    config = json.loads((REPO / "cookiecutter.json").read_text())
    assert f"slugify(max_length={extension.DERIVED_MAX})" in config["project"]


def test_a_project_name_with_nothing_to_derive_from_is_refused_in_one_line(tmp_path):
    result = cookiecutter_cli(tmp_path, "project_name=🚀 ✨")
    assert_refused_in_one_line(result, "project '' is empty")
    assert list(tmp_path.iterdir()) == []


# Each would create the marker file if cookiecutter rendered it without the sandbox.
ATTACKS = [
    "{{ cycler.__init__.__globals__.os.system('touch MARKER') }}",
    "{{ joiner.__init__.__globals__.os.popen('touch MARKER').read() }}",
    "{{ lipsum.__globals__['os'].system('touch MARKER') }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}{{ namespace.__init__.__globals__ }}",
    "{{ cookiecutter.__class__.__init__.__globals__['sys'].modules.os.system('touch MARKER') }}",
    "{{ self._TemplateReference__context.cycler.__init__.__globals__.os.system('touch MARKER') }}",
    "{{ '{0.__class__.__init__.__globals__}'.format(cycler) }}",
]


@pytest.mark.parametrize(
    ("key", "attack"),
    [("project_name", attack) for attack in ATTACKS]
    + [(key, ATTACKS[0]) for key in ["project", "package", "description", "author", "email"]],
)
def test_an_answer_that_would_run_code_is_refused_and_runs_nothing(key, attack, tmp_path):
    marker = tmp_path / "pwned"
    answer = attack.replace("MARKER", str(marker))
    output = tmp_path / "out"
    result = cookiecutter_cli(tmp_path, f"{key}={answer}", "-o", str(output))
    assert_refused_in_one_line(result, "an answer holds Jinja that could run code (")
    assert not marker.exists()
    assert list(tmp_path.iterdir()) == []


def test_answers_still_render_jinja_that_reads_other_answers(tmp_path):
    # The derived defaults are Jinja in the sandbox too; so may an answer be.
    result = cookiecutter_cli(
        tmp_path, "project_name=Digit Classifier", "description={{ cookiecutter.project_name }}!"
    )
    assert result.returncode == 0, result.stderr
    project = tmp_path / "digit-classifier"
    assert (project / "src" / "digit_classifier" / "cli.py").is_file()
    pyproject = (project / "pyproject.toml").read_text()
    assert re.search(r'^description = "Digit Classifier!"$', pyproject, re.M)


@pytest.mark.parametrize(
    ("answer", "expected"),
    re.findall(
        r"```console\n\$ cookiecutter --no-input <template> (.*?)\n(.*?)\n```",
        (REPO / "README.md").read_text(),
        re.S,
    ),
)
def test_command_line_prints_what_the_readme_quotes(answer, expected, tmp_path):
    result = cookiecutter_cli(tmp_path, answer)
    assert result.stderr == f"{expected}\n" and result.stdout == ""
    assert result.returncode == 1
    assert list(tmp_path.iterdir()) == []
