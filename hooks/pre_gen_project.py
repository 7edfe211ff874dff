"""Validates the answers before cookiecutter writes anything.

Each check is a plain function, which the template's Jinja extension (lightning_template_jinja.py)
calls as cookiecutter renders the project folder's name, before the folder exists: a hook that
fails makes cookiecutter print a traceback after its line. The block at the bottom, the only
part that cookiecutter renders, runs the same checks where cookiecutter runs the hook.
"""

import keyword
import re
import sys
from email.errors import HeaderParseError
from email.headerregistry import Address

# Import names a generated package must not take: it would shadow one of these, those of the
# generated project's requirements, its extras' and its tests' (lowercase: pil is PIL on file
# systems that ignore case; tests/test_hooks.py reads them off the installed distributions).
DEPENDENCIES = {
    "aiohttp", "boto3", "botocore", "check_jsonschema", "dotenv", "filelock", "fortune",
    "functorch", "hydra", "hydra_plugins", "isal", "kubernetes_validate", "lightning",
    "lightning_fabric", "litdata", "matplotlib", "mlflow", "moto", "mpl_toolkits", "multipart",
    "mypy", "mypyc", "numpy", "omegaconf", "onnx", "onnxruntime", "onnxscript", "openvino",
    "optuna", "packaging", "pandas", "pil", "playwright", "pre_commit", "pre_commit_hooks",
    "psutil", "py", "pyarrow", "pydantic", "pydantic_core", "pydevd_plugins", "pylab", "pytest",
    "python_multipart", "pytorch_lightning", "rich", "ruff", "safetensors", "schemathesis",
    "scipy", "sklearn", "sqlalchemy", "starlette", "tensorboard", "test", "tests", "tokenizers",
    "tomli", "torch", "torchgen", "torchmetrics", "torchvision", "transformers", "tritonclient",
    "tritonclientutils", "tritongrpcclient", "tritonhttpclient", "tritonshmutils",
    "typing_extensions", "uv", "uvicorn", "wandb", "xdist", "yaml",
}  # fmt: skip
# Matched with fullmatch: `$` would also accept the name followed by a newline.
DISTRIBUTION = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")
# Device names that Windows refuses as a file or folder name.
RESERVED = {
    "con", "prn", "aux", "nul", *(f"{port}{n}" for port in ("com", "lpt") for n in range(10))
}
# The longest path the template generates below the project folder that holds the package
# (tests/test_hooks.py reads it off the template's files). Windows refuses paths over 260
# characters unless long paths are enabled: 200 go below the project folder, 60 stay for the
# folders above it. That bounds the package name well below the 255 bytes a file system allows
# in one name (it is ASCII by then, so characters are bytes).
PACKAGE_PATH = "src/{}/callbacks/confusion_matrix.py"
PATH_MAX = 200
PACKAGE_MAX = PATH_MAX - len(PACKAGE_PATH.format(""))
CHOICES = {
    "python_version": ("3.10", "3.11", "3.12"),
    "logger": ("tensorboard", "wandb", "mlflow", "csv"),
    "license": ("MIT", "Apache-2.0", "BSD-3-Clause", "Proprietary"),
}


def suggest_package(name: str) -> str:
    """A lowercase identifier close to `name` that passes `check_package`."""
    candidate = re.sub(r"[^a-z0-9_]+", "_", name.lower()).strip("_") or "project"
    if candidate[0].isdigit():
        candidate = f"p{candidate}"
    taken = sys.stdlib_module_names | DEPENDENCIES | RESERVED
    if keyword.iskeyword(candidate) or candidate in taken:
        candidate = f"{candidate}_project"
    return candidate[:PACKAGE_MAX].rstrip("_")


def shorten(name: str) -> str:
    """`name` as an error line shows it: a very long one would bury the rest of the line."""
    return name if len(name) <= 40 else f"{name[:30]}..."


def check_package(name: str) -> str | None:
    if not name.isidentifier() or name != name.lower() or not name.isascii():
        rule = "must be a lowercase Python identifier (a-z, 0-9, _; not starting with a digit)"
    elif keyword.iskeyword(name):
        rule = "is a Python keyword"
    elif name in sys.stdlib_module_names:
        rule = "would shadow the standard library module of that name"
    elif name in DEPENDENCIES:
        rule = "would shadow a dependency or test folder of the same name"
    elif name in RESERVED:
        rule = "is a device name that Windows refuses as a folder name"
    elif len(name) > PACKAGE_MAX:
        path = PACKAGE_PATH.format("<package>")
        rule = (
            f"is {len(name)} characters; {path} would be {len(PACKAGE_PATH.format(name))} "
            f"characters, over the {PATH_MAX} a path below the project folder may have"
        )
    else:
        return None
    return f"package {shorten(name)!r} {rule}; try package={suggest_package(name)!r}"


def check_project(name: str) -> str | None:
    # A name that cannot be a folder's (a separator, `..`, over 255 bytes) never gets here: the
    # template's Jinja extension (lightning_template_jinja.py) refuses it before the folder exists.
    if name in RESERVED:
        return (
            f"project {name!r} is a device name that Windows refuses as a folder name; "
            f"try project={name + '-project'!r}"
        )
    if DISTRIBUTION.fullmatch(name):
        return None
    suggestion = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "my-project"
    return (
        f"project {shorten(name)!r} is not a valid distribution name (lowercase letters, "
        f"digits and '-', starting and ending with a letter or digit); try project={suggestion!r}"
    )


def metadata_problem(name: str, email: str) -> str | None:
    """Why the project's build would fail to write `name <email>` as its author, if it would."""
    try:
        Address(display_name=name, addr_spec=email)  # what the build backend writes it with
    except (ValueError, HeaderParseError) as error:
        return str(error).rstrip(")")
    return None


def check_author(author: str) -> str | None:
    if not (problem := metadata_problem(author, "you@example.com")):
        return None
    one_line = " ".join(author.split())
    rule = f"cannot be package metadata ({problem})"
    return f"author {shorten(author)!r} {rule}; try author={one_line!r}"


def check_email(email: str) -> str | None:
    if not re.fullmatch(r"[^@\s]+@[^@\s]+", email):
        rule = "is not an email address (name@domain)"
    elif problem := metadata_problem("", email):
        rule = f"cannot be package metadata ({problem})"
    else:
        return None
    return f"email {email!r} {rule}; try email='you@example.com'"


def check_choice(key: str, value: str) -> str | None:
    if value in CHOICES[key]:
        return None
    return f"{key} {value!r} is not one of {', '.join(CHOICES[key])}; try {key}={CHOICES[key][0]!r}"


def first_problem(answers: dict) -> str | None:
    """The first invalid answer, described in one line, or None when all are valid."""
    checks = [
        check_project(answers["project"]),
        check_package(answers["package"]),
        check_author(answers["author"]),
        check_email(answers["email"]),
        *(check_choice(key, answers[key]) for key in CHOICES),
    ]
    return next((problem for problem in checks if problem), None)


if __name__ == "__main__":
    problem = first_problem(
        {
            "project": {{ cookiecutter.project | tojson }},
            "package": {{ cookiecutter.package | tojson }},
            "author": {{ cookiecutter.author | tojson }},
            "email": {{ cookiecutter.email | tojson }},
            "python_version": {{ cookiecutter.python_version | tojson }},
            "logger": {{ cookiecutter.logger | tojson }},
            "license": {{ cookiecutter.license | tojson }},
        }
    )
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(1)
