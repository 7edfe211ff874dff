"""predict without Hydra. Importing Hydra and composing predict's config take longer than
predicting an image (benchmarks/startup.py): when every argument is a plain `key=value` of
predict's own settings, or `hydra.run.dir=...`, and the config files are as shipped (a defaults
list of `_self_` and `group: option`), the files are read with PyYAML and the run directory made
as Hydra makes it: the same checks (run_dir.py), `.hydra/config.yaml` and `overrides.yaml`, and
the `<task>.log` of Hydra's logging. Anything else goes to Hydra: `--help`, `--cfg`, `-m`, a
group choice, `+key`, a quoted, listed or interpolated value; tests/test_cli.py checks that
both read the same arguments alike.
"""

import logging
import os
import re
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from .run_dir import STAMP, own_directory, refusal

# Settings whose value Hydra's override grammar reads as this same text, or as a whole number:
# no quotes, brackets, commas, interpolations, escapes or spaces.
PLAIN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*|hydra\.run\.dir)=([A-Za-z0-9_./@+-]+)")
WHOLE = re.compile(r"[+-]?(0|[1-9][0-9]*)")
# Other words that Hydra reads as values of their own type: booleans, null, numbers.
TYPED = {"true", "false", "null"}
# What of Hydra's own config (configs/hydra/) the plain route does as Hydra would.
KNOWN_HYDRA = {
    "run": {"dir"},
    "sweep": {"dir", "subdir"},
    "job": {"chdir", "name"},
    "callbacks": {"keep_run_records"},  # whose checks start() makes
}
INTERPOLATION = re.compile(r"\$\{([^${}]*)\}")
# Hydra's log line (its job_logging config).
LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"
# libyaml's parser where PyYAML was built with it: a tenth of the pure-Python one's time.
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class NotPlain(Exception):
    """Something Hydra must read."""


def value_of(text: str) -> Any:
    """The value of an override's text, as Hydra reads it: a whole number or text."""
    if WHOLE.fullmatch(text):
        return int(text)
    try:
        float(text)  # 1.5, 1e3, inf, nan: Hydra reads a float
    except ValueError:
        if text.lower() not in TYPED:
            return text
    raise NotPlain(text)


def overrides(arguments: list[str]) -> dict[str, Any]:
    """Each argument's key and value, if all are plain."""
    parsed = {}
    for argument in arguments:
        match = PLAIN.fullmatch(argument)
        if not match or match[1] in parsed:
            raise NotPlain(argument)
        parsed[match[1]] = value_of(match[2])
    return parsed


def load(path: Path) -> dict:
    text = path.read_text()
    if "@package" in text:
        raise NotPlain(path)
    config = yaml.load(text, Loader=LOADER) or {}
    if not isinstance(config, dict):
        raise NotPlain(path)
    return config


def composed(config_dir: Path, name: str) -> dict:
    """The config `name` with the options its defaults list chooses, each under its group's key
    (`hydra` too), as Hydra composes a defaults list of `_self_` and `group: option`."""
    config = load(config_dir / f"{name}.yaml")
    for entry in config.pop("defaults", []):
        if entry == "_self_":
            continue
        if not isinstance(entry, dict) or len(entry) != 1:
            raise NotPlain(entry)
        [(group, option)] = entry.items()
        if not isinstance(option, str) or not re.fullmatch(r"\w+", group) or group in config:
            raise NotPlain(entry)
        config[group] = load(config_dir / group / f"{option}.yaml")
        if "defaults" in config[group]:
            raise NotPlain(entry)
    return config


def resolved(value: Any, config: dict, runtime: dict, depth: int = 0) -> Any:
    """`value` with the interpolations Hydra's run configs use: `${key.path}`, `${hydra:...}`
    of `runtime`, `${run_stamp:...}`."""
    if isinstance(value, dict):
        return {key: resolved(item, config, runtime, depth) for key, item in value.items()}
    if not isinstance(value, str) or "${" not in value:
        return value
    if depth > 10:
        raise NotPlain(value)

    def one(match: re.Match) -> str:
        name = match[1]
        if name.startswith("hydra:") and name[6:] in runtime:
            return runtime[name[6:]]
        if name.startswith("run_stamp:"):
            return runtime.setdefault(name, datetime.now().strftime(name[10:]))
        node: Any = config
        for key in name.split("."):
            if not isinstance(node, dict) or key not in node:
                raise NotPlain(name)
            node = node[key]
        return str(resolved(node, config, runtime, depth + 1))

    text = INTERPOLATION.sub(one, value)
    if "${" in text:
        raise NotPlain(value)
    return text


class PlainRun:
    """A run of `task` whose command line and configs need no Hydra: its config (resolved), the
    run directory, and what Hydra would write there."""

    def __init__(self, task: str, arguments: list[str], config_dir: Path):
        given = overrides(arguments)
        config = composed(config_dir, task)
        hydra = config.pop("hydra", {})
        job = hydra.get("job") or {}
        known = all(set(hydra.get(key) or {}) <= keys for key, keys in KNOWN_HYDRA.items())
        if not known or set(hydra) - set(KNOWN_HYDRA) or job.get("chdir"):
            raise NotPlain(hydra)
        run_dir = given.pop("hydra.run.dir", (hydra.get("run") or {}).get("dir"))
        if not isinstance(run_dir, str):
            raise NotPlain(run_dir)
        for key, value in given.items():
            if key not in config or isinstance(config[key], dict):
                raise NotPlain(key)  # Hydra says what is wrong with it
            config[key] = value
        # Hydra records the task's overrides, not its own.
        self.overrides = [argument for argument in arguments if argument.split("=")[0] in given]
        self.stamped = STAMP in run_dir
        self.runtime = {"runtime.cwd": os.getcwd()}
        self.run_dir = Path(os.path.abspath(resolved(run_dir, config, self.runtime)))
        self.runtime["runtime.output_dir"] = str(self.run_dir)
        self.log_name = resolved(job.get("name", task), config, self.runtime)
        self.saved = config
        self.config = resolved(config, config, self.runtime)

    def start(self) -> None:
        """Refuses the run directory in one line, as launch.KeepRunRecords does, or writes
        Hydra's records into it and logs to its `<task>.log` and the console."""
        from .console import exit_with_error

        if self.stamped:
            self.run_dir = own_directory(self.run_dir)
            self.runtime["runtime.output_dir"] = str(self.run_dir)
            self.config = resolved(self.saved, self.saved, self.runtime)
        output_dir = self.config.get("paths", {}).get("output_dir")
        problem = refusal(self.run_dir, self.saved, output_dir)
        if problem:
            exit_with_error(problem)
        records = self.run_dir / ".hydra"
        records.mkdir(parents=True, exist_ok=True)
        (records / "config.yaml").write_text(yaml.safe_dump(self.saved, sort_keys=False))
        (records / "overrides.yaml").write_text(yaml.safe_dump(self.overrides))
        formatter = logging.Formatter(LOG_FORMAT)
        handlers: list[logging.Handler] = [
            logging.StreamHandler(sys.stdout),
            logging.FileHandler(self.run_dir / f"{self.log_name}.log"),
        ]
        root = logging.getLogger()
        for handler in handlers:
            handler.setFormatter(formatter)
            root.addHandler(handler)
        root.setLevel(logging.INFO)


def plain_run(task: str, arguments: list[str], config_dir: Path) -> PlainRun | None:
    """The plain run of these arguments, or None where Hydra must read them."""
    try:
        return PlainRun(task, arguments, config_dir)
    except (NotPlain, OSError, yaml.YAMLError):
        return None
