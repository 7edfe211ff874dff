"""The pre-generation hook's checks reject bad answers in one line, which is all that cookiecutter
prints, and nothing is left behind."""

import importlib.util
import json
import re
import sys
import tomllib
from importlib import metadata
from itertools import chain

import pytest
from conftest import REPO, render
from cookiecutter.generate import generate_context
from cookiecutter.main import cookiecutter
from cookiecutter.prompt import prompt_for_config
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

spec = importlib.util.spec_from_file_location(
    "pre_gen_project", REPO / "hooks" / "pre_gen_project.py"
)
hook = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hook)  # the rendered block runs only as __main__

REJECTED = [
    (
        {"package": "My-Package"},
        "package 'My-Package' must be a lowercase Python identifier",
        "my_package",
    ),
    ({"package": "3d_digits"}, "must be a lowercase Python identifier", "p3d_digits"),
    ({"package": "class"}, "package 'class' is a Python keyword", "class_project"),
    ({"package": "json"}, "would shadow the standard library", "json_project"),
    *(
        ({"package": name}, f"package {name!r} would shadow a dependency", f"{name}_project")
        for name in [
            "torch",
            "pytorch_lightning",
            "hydra",
            "numpy",
            "sklearn",
            "onnx",
            "test",
            "tests",
        ]
    ),
    (
        {"project": "Digit Classifier"},
        "project 'Digit Classifier' is not a valid distribution name",
        "digit-classifier",
    ),
    ({"project": "-digits"}, "is not a valid distribution name", "digits"),
    ({"project": "con"}, "project 'con' is a device name that Windows refuses", "con-project"),
    ({"package": "nul"}, "package 'nul' is a device name that Windows refuses", "nul_project"),
    # 300 is over the 255 bytes of a folder name; 167 fits one, but not the longest path.
    *(
        ({"package": "a" * length}, f"package '{'a' * 30}...' is {length} characters", "a" * 166)
        for length in [300, 167]
    ),
    (
        {"email": "nobody.example.com"},
        "email 'nobody.example.com' is not an email address",
        "you@example.com",
    ),
    # The build backend writes `author <email>` as a mail header, which cannot hold these.
    (
        {"email": "zoë@example.com"},
        "email 'zoë@example.com' cannot be package metadata (local-part contains non-ASCII",
        "you@example.com",
    ),
    (
        {"author": "Ada\nLovelace"},
        "author 'Ada\\nLovelace' cannot be package metadata",
        "Ada Lovelace",
    ),
]


@pytest.mark.parametrize(("answers", "message", "suggestion"), REJECTED)
def test_rejected_answer_fails_with_one_line_and_leaves_nothing(
    answers, message, suggestion, tmp_path, capfd
):
    with pytest.raises(SystemExit) as stopped:
        cookiecutter(str(REPO), no_input=True, extra_context=answers, output_dir=str(tmp_path))
    assert stopped.value.code == 1
    printed = capfd.readouterr()
    lines = printed.err.strip().splitlines()
    assert len(lines) == 1 and printed.out == ""  # no traceback of cookiecutter's after it
    assert lines[0].startswith("error: ") and message in lines[0]
    assert f"={suggestion!r}" in lines[0]  # a valid value to try instead
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("suggested", [line[2] for line in REJECTED if "package" in line[0]])
def test_suggested_package_names_are_accepted(suggested):
    assert hook.check_package(suggested) is None


def test_valid_answers_pass():
    answers = {
        "project": "digit-classifier",
        "package": "digit_classifier",
        "author": "Zoë 🐍",
        "email": "zoe@例え.jp",  # a domain may be non-ASCII
        "python_version": "3.11",
        "logger": "wandb",
        "license": "MIT",
    }
    assert hook.first_problem(answers) is None
    assert "logger 'neptune' is not one of" in hook.first_problem({**answers, "logger": "neptune"})


def test_names_derive_from_the_project_name(tmp_path):
    project = render(tmp_path, project_name="Digit Classifier")
    assert project.name == "digit-classifier"
    assert (project / "src" / "digit_classifier" / "cli.py").is_file()


def test_package_path_is_the_longest_path_the_template_generates_in_the_package():
    template = REPO / "{{cookiecutter.project}}"
    paths = [str(path.relative_to(template)) for path in template.rglob("*") if path.is_file()]
    in_package = [
        path.replace("{{cookiecutter.package}}", "{}")
        for path in paths
        if "{{cookiecutter.package}}" in path
    ]
    assert hook.PACKAGE_PATH in in_package
    assert len(hook.PACKAGE_PATH) == max(map(len, in_package))
    assert hook.check_package("a" * hook.PACKAGE_MAX) is None
    assert hook.check_package("a" * (hook.PACKAGE_MAX + 1)) is not None


def test_too_long_package_leaves_nothing_and_the_suggested_rerun_renders(tmp_path, capfd):
    with pytest.raises(SystemExit):
        render(tmp_path, package="a" * 300)
    (line,) = capfd.readouterr().err.strip().splitlines()
    assert list(tmp_path.iterdir()) == []

    suggested = line.rsplit("try package=", 1)[1].strip("'")
    project = render(tmp_path, package=suggested)
    assert (project / "src" / suggested / "cli.py").is_file()
    longest = max(len(str(path.relative_to(project))) for path in project.rglob("*"))
    assert longest == hook.PATH_MAX  # the suggestion is as long as the limit allows


def test_every_import_name_of_the_generated_project_s_requirements_is_refused(tmp_path):
    """A package named as one of them (transformers, uvicorn, yaml) would shadow it. Read off the
    installed distributions of every requirement of the rendered pyproject.toml, extras too."""
    project = tomllib.loads((render(tmp_path) / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"], *chain(*project["optional-dependencies"].values())]
    wanted = {canonicalize_name(Requirement(line).name) for line in requirements}
    installed = metadata.packages_distributions()
    names = {
        name.lower()
        for name, distributions in installed.items()
        if wanted & {canonicalize_name(distribution) for distribution in distributions}
        and name.isidentifier()
        and not name.startswith("_")
        and "__mypyc" not in name  # a compiled helper's hashed name
    }
    assert {"torch", "transformers", "yaml", "pil", "hydra_plugins"} <= names
    assert names - sys.stdlib_module_names <= hook.DEPENDENCIES
    for name in names - sys.stdlib_module_names:
        assert "would shadow a dependency" in hook.check_package(name)


def test_hook_choices_are_the_choices_of_cookiecutter_json():
    config = json.loads((REPO / "cookiecutter.json").read_text())
    prompts = {key: value for key, value in config.items() if not key.startswith("_")}
    lists = {key: set(value) for key, value in prompts.items() if isinstance(value, list)}
    # Same options, key by key; the order differs (cookiecutter.json lists the default first).
    assert {key: set(options) for key, options in hook.CHOICES.items()} == lists


def test_every_key_the_hooks_read_is_a_prompt_and_the_defaults_pass():
    hooks = [path.read_text() for path in (REPO / "hooks").glob("*.py")]
    keys = {key for text in hooks for key in re.findall(r"\{\{ cookiecutter\.(\w+)", text)}
    context = prompt_for_config(generate_context(REPO / "cookiecutter.json"), no_input=True)
    assert keys <= {key for key in context if not key.startswith("_")}
    # first_problem reads no answer that the rendered block does not pass it.
    assert hook.first_problem({key: context[key] for key in keys}) is None
