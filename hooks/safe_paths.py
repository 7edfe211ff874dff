"""A Jinja extension that cookiecutter loads (`_extensions` in cookiecutter.json): no rendered
value may hold a `..` path part.

cookiecutter creates the project folder before the pre-gen hook checks the answers, and deletes
it when the hook refuses them. A project named `..` (or `x/..`) makes that folder the output
folder or its parent, which it would then delete with everything in it. This check runs while
the folder's name is rendered, before anything is created.
"""

from jinja2.ext import Extension


def no_parent_part(value):
    if isinstance(value, str) and ".." in value.replace("\\", "/").split("/"):
        raise ValueError(
            f"{value!r} holds '..', which would lead out of the output folder; choose a name "
            "without it, e.g. digit-classifier"
        )
    return value


class SafePaths(Extension):
    def __init__(self, environment):
        super().__init__(environment)
        environment.finalize = no_parent_part  # applied to every {{ ... }} that is rendered
