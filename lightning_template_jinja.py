"""The Jinja extension cookiecutter loads for this template (`_extensions` in cookiecutter.json).

It lives in a top-level module with a name of its own: cookiecutter and cruft append the template
folder to `sys.path` before they render, so a common name (`hooks`) could import another module of
that name first, and tools that render the answers before cookiecutter does (pytest-cookies) need
the template folder on the path themselves (the template's tests put it there).

While cookiecutter renders, before it writes anything, it
- renders in Jinja's sandbox: cookiecutter renders every answer as a template, so without it an
  answer such as `{{ cycler.__init__.__globals__.os.system(...) }}` would run a command;
- checks the answers as it renders the project folder's name, before cookiecutter creates the
  folder: first the name as a folder's (a name with a separator would leave its parent folders
  behind, `..` would make cookiecutter delete the output folder's parent when the hook refuses
  it, and a name over 255 bytes ends in an OSError), then every answer by the pre-generation
  hook's own checks, which cookiecutter runs only once the folder exists and whose failure it
  reports with a traceback;
- offers `toml_string`, which writes a string as TOML reads it (`tojson` writes a character beyond
  U+FFFF as a surrogate pair of `\\u` escapes, which TOML refuses).
"""

import functools
import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import NoReturn

from jinja2.exceptions import SecurityError
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment, safe_range

# The name of the template's project folder, which cookiecutter renders to create the project.
PROJECT_FOLDER = "{{cookiecutter.project}}"
CHECKED_FOLDER = "{{ cookiecutter | project_folder }}"
# The checks of every answer: the pre-generation hook's plain functions.
HOOK = Path(__file__).with_name("hooks") / "pre_gen_project.py"
# One name in a path: 255 bytes on Linux file systems, 255 characters on Windows and macOS.
NAME_MAX = 255
# The longest `project` that cookiecutter.json derives from `project_name` (slugify's max_length).
DERIVED_MAX = 64
# Separators on any system, and what Windows refuses in a name.
NOT_IN_A_NAME = re.compile(r'[/\\<>:"|?*\x00-\x1f]')


def refuse(problem: str) -> NoReturn:
    """Stops generation with one line on stderr, before cookiecutter writes anything."""
    print(f"error: {problem}", file=sys.stderr)
    raise SystemExit(1)


def suggest_project(name: str) -> str:
    """A name close to `name` that the pre-gen hook accepts: its own suggestion, cut to the length
    of a derived name."""
    suggestion = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:DERIVED_MAX]
    return suggestion.strip("-") or "my-project"


def project_folder(answers: dict) -> str:
    """The project folder's name, once it and every other answer passed their checks."""
    name = answers["project"]
    shown = name if len(name) <= 40 else f"{name[:30]}..."
    if not name:
        problem = "is empty (the project name has no letter or digit to derive it from)"
    elif name in (".", ".."):
        problem = "would be the output folder or its parent, not a folder of its own"
    elif found := NOT_IN_A_NAME.search(name):
        problem = f"holds {found[0]!r}, which a folder name cannot hold"
    elif len(name.encode()) > NAME_MAX:
        problem = f"is {len(name.encode())} bytes, over the {NAME_MAX} a folder name may have"
    else:
        if problem := answers_problem(answers):
            refuse(problem)
        return name
    refuse(f"project {shown!r} {problem}; try project={suggest_project(name)!r}")


def answers_problem(answers: dict) -> str | None:
    """The first answer that the pre-generation hook refuses, in its line; None if none."""
    spec = importlib.util.spec_from_file_location("pre_gen_project", HOOK)
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)  # its rendered block runs only as __main__
    return hook.first_problem(answers)


def toml_string(value: str) -> str:
    """`value` as a TOML basic string: characters as they are, control characters escaped (JSON
    escapes all but DEL, and its escapes are TOML's)."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


@functools.cache
def sandboxed(environment_class: type) -> type:
    """`environment_class` with the rules of Jinja's sandbox, which cannot be chosen otherwise:
    cookiecutter creates its environment itself and lets a template add only extensions."""

    class Sandboxed(ImmutableSandboxedEnvironment, environment_class):
        def handle_exception(self, source=None):
            error = sys.exc_info()[1]
            if isinstance(error, SecurityError):
                refuse(f"an answer holds Jinja that could run code ({error}); give it as text")
            super().handle_exception(source)

    return Sandboxed


class SafeRendering(Extension):
    def __init__(self, environment):
        super().__init__(environment)
        # What ImmutableSandboxedEnvironment.__init__ would set; the class adds the checks.
        environment.__class__ = sandboxed(type(environment))
        environment.globals["range"] = safe_range
        environment.binop_table = environment.default_binop_table.copy()
        environment.unop_table = environment.default_unop_table.copy()
        environment.filters["project_folder"] = project_folder
        environment.filters["toml_string"] = toml_string

    def preprocess(self, source, name, filename=None):
        # The folder's name is checked as it is rendered, which is before the folder exists.
        return CHECKED_FOLDER if source == PROJECT_FOLDER else source
