"""Finding plug-ins by name: the modules of a package such as kinds/ or targets/, each one a
plug-in named after its module. A new one is a module dropped into the package: nothing else
lists it. The package's `REQUIRED` names what each of its modules defines."""

import importlib
import pkgutil
import sys
from types import ModuleType

from .console import UserError


def names(package: ModuleType) -> list[str]:
    """The plug-ins a package holds: its modules, by name."""
    return sorted(info.name for info in pkgutil.iter_modules(package.__path__))


def find(package: ModuleType, name: str, what: str) -> ModuleType:
    """The plug-in module `name` of `package`, imported only now: a command imports only what
    its inputs need (Pillow for images, pandas for tables). One imported before is known without
    listing the package's folder again, which would cost serve more than its model per request."""
    module = sys.modules.get(f"{package.__name__}.{name}") if isinstance(name, str) else None
    if module is not None:
        return module
    if not isinstance(name, str) or name not in names(package):
        raise UserError(f"{what} {name!r} is unknown; known: {', '.join(names(package))}")
    module = importlib.import_module(f"{package.__name__}.{name}")
    missing = [part for part in package.REQUIRED if not hasattr(module, part)]
    if missing:  # a plug-in of the user's own, half written: before a command needs the part
        del sys.modules[module.__name__]
        folder = package.__name__.rsplit(".", 1)[-1]
        raise UserError(
            f"{what} {name!r} ({folder}/{name}.py) lacks {', '.join(missing)}: "
            f"{folder}/__init__.py says what each one is"
        )
    return module
