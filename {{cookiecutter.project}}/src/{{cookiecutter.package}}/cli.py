"""Console entry points: Hydra parses the command line, the task modules do the work.

Task modules are imported only once a task runs, so config-only commands such as
`--help` and `--cfg job` never import torch or Lightning; Hydra only where the command line
needs it: predict with plain settings runs without (plain_run.py).
"""

import gc
import importlib
import logging
import os
import re
import signal
import sys
from pathlib import Path

from .console import (
    Diverged,
    UserError,
    cannot_write,
    escape_unencodable,
    exit_with_error,
    show,
    silence_noise,
)
from .files import WRITE_ERRORS
from .plain_run import plain_run

# The function of each task in tasks/, keyed by its module and config name in configs/.
TASKS = {
    "train": "train",
    "eval": "evaluate",
    "export": "export",
    "optimize": "optimize",
    # predict and serve import only numpy, onnxruntime, Pillow and pandas (serve: and its HTTP
    # libraries): they run where torch is not installed.
    "predict": "predict",
    "serve": "serve",
}
# The function of input_checks.py that checks each Lightning task's input first.
CHECKS = {"train": "train_input", "eval": "eval_input", "export": "export_input"}


def config_dir() -> str:
    """The configs packaged in an installed wheel, else the project's own configs/ folder."""
    packaged = Path(__file__).parent / "configs"
    return str(packaged if packaged.is_dir() else Path(__file__).parents[2] / "configs")


def with_options(line: str) -> str:
    """Hydra's line for a choice in a list that names no config (`logger=[csv,nope]`), with the
    options its group has, as Hydra gives them for a single choice."""
    missing = re.search(r"Could not load '([\w/]+)/[^/']+'$", line)
    if not missing:
        return line
    group = missing[1]
    options = sorted(path.stem for path in (Path(config_dir()) / group).glob("*.yaml"))
    return f"{line}; available options in '{group}': {', '.join(options)}" if options else line


# Hydra's functions of an override's value, as in seed=range(1,4).
SWEEP = re.compile(
    r"(choice|range|interval|tag|glob|sort|shuffle|extend_list|int|float|str|bool|json_str)\("
)


def unreadable_override(override: str, hydra_line: str) -> str:
    """A setting that Hydra's override grammar cannot read, named, and quoted where its value is
    meant as one string that holds a character of the grammar: a path with `=` in it (Lightning
    names checkpoints `epoch=2-step=40.ckpt`), or with ( ), { }, !, &, # or ~."""
    key, equals, value = override.partition("=")
    if not equals:
        return f"{override!r} is not a setting: write key=value, e.g. seed=7"
    if value.startswith("~/"):  # the shell expands ~ at the start of a word only
        return f"cannot read {override}: write your home folder as $HOME, {key}=$HOME{value[1:]}"
    if hydra_line.startswith("LexerNoViableAltException"):  # the override and a caret below it
        hydra_line = (
            f"a character of it is not in Hydra's grammar; see {hydra_line.split('see ')[-1]}"
        )
    line = f"cannot read {override}: {hydra_line}"
    special = next((char for char in value if char in "=()[]{}!&#;<>~"), None)
    # A list or a sweep written wrong ([1,2 or range(1,3) is not a string to quote, nor a value
    # with quotes.
    if special is None or value[0] in "[{(" or SWEEP.match(value) or {"'", '"'} & set(value):
        return line
    return (
        f"cannot read {override}: Hydra's override grammar gives {special!r} a meaning of its "
        f"own; quote a path or name that holds it, as in '{key}=\"{value}\"'"
    )


def yaml_error_line(error: Exception) -> str:
    """Where a YAML file breaks, and what the parser found there."""
    mark = getattr(error, "problem_mark", None)
    where = f"{mark.name}, line {mark.line + 1}, column {mark.column + 1}," if mark else "a file"
    problem = getattr(error, "problem", None) or str(error)
    return f"{where} is not valid YAML: {problem}; correct it there"


def write_error(cfg, error: OSError, run_dir: str) -> str:
    """The line for a file that could not be written: the file, if it is the run's or the
    export's (a temporary file elsewhere says nothing), and the setting that moves it."""
    output_dir = str(Path(cfg.get("output_dir") or run_dir).absolute())
    filename = str(error.filename or "")
    if output_dir != run_dir and filename.startswith(output_dir):  # also <output_dir>.staging
        return cannot_write(filename, error, "output_dir=...")
    return cannot_write(filename if filename.startswith(run_dir) else run_dir, error)


def import_task(module: str):
    """Imports a task's module with the garbage collector paused, then leaves what it imported
    out of later collections: torch and Lightning make hundreds of thousands of objects that
    are not garbage, which the collector would otherwise go through again and again (0.7 to
    0.9 s of the 4 to 5 s from launch to the first training step on 2 cores)."""
    gc.disable()
    try:
        return importlib.import_module(module)
    finally:
        gc.freeze()
        gc.enable()


def run_task(name: str, cfg, run_dir: str):
    """Runs the task on its config: what the user can fix, and Ctrl-C, end it in one line."""
    silence_noise()
    escape_unencodable()  # Hydra's log file is open by now
    try:
        if name in CHECKS:  # refused before the task's module imports Lightning (seconds)
            getattr(importlib.import_module(f"{__package__}.input_checks"), CHECKS[name])(cfg)
        task = getattr(import_task(f"{__package__}.tasks.{name}"), TASKS[name])
        result = task(cfg)
        end_process_group()
        return result
    except Diverged as error:
        from .launch import in_sweep  # Hydra: predict may run without

        if not in_sweep():
            exit_with_error(str(error), error.exit_status)
        show(f"{error}. The sweep goes on: this job is a failed trial")
        return None
    except UserError as error:
        exit_with_error(str(error), error.exit_status)
    except KeyboardInterrupt:
        # Outside a Trainer call: the tasks say how to go on from an interrupted one.
        exit_with_error(f"{name} stopped by Ctrl-C (SIGINT)", 128 + signal.SIGINT)
    except OSError as error:
        if error.errno not in WRITE_ERRORS:
            raise
        exit_with_error(write_error(cfg, error, run_dir))
    except Exception as error:
        line = unresolved_setting(error)
        if line is None:
            raise
        exit_with_error(line)


def unresolved_setting(error: Exception) -> str | None:
    """The line for a config value that cannot be resolved, which OmegaConf finds only when a
    task reads it: an interpolation of a key no config sets (a model config of the user's own
    without `monitor`, which the callbacks read as `${model.monitor}`), a `???` left unset.
    None for any other error."""
    errors = sys.modules.get("omegaconf.errors")  # not imported: not one of its errors
    if errors is None or not isinstance(error, errors.OmegaConfBaseException):
        return None
    message = str(error).splitlines()[0]  # the lines below, when there are any: where it was
    subject = getattr(error, "full_key", None) or "the config"  # instantiate does not say
    if isinstance(error, errors.MissingMandatoryValue) and subject != "the config":
        return f"{subject} is not set: pass {subject}=<value>"
    if isinstance(error, errors.InterpolationKeyError):
        key = message.split("'")[1]  # Interpolation key '<key>' not found
        reference = "${" + key + "}"
        return (
            f"{subject} reads {reference}, which no config sets: set {key} in its config, "
            f"or pass +{key}=<value>"
        )
    if isinstance(error, errors.MissingMandatoryValue | errors.InterpolationResolutionError):
        return f"{subject}: {message}"
    return None


def end_process_group() -> None:
    """Ends this process's part in DDP once its task has ended well. Lightning leaves the
    process group to the end of the process, where gloo's threads, torn down with the
    interpreter, can abort it after a finished run ("terminate called without an active
    exception", exit -6), and `train.py && export.py` would stop there."""
    distributed = sys.modules.get("torch.distributed")  # imported by the tasks that use it
    if distributed is not None and distributed.is_available() and distributed.is_initialized():
        distributed.destroy_process_group()


def prepare() -> None:
    from dotenv import find_dotenv, load_dotenv

    # A job that a script starts in the background inherits Ctrl-C ignored, and Python keeps it
    # so: train and export would then run to the end and exit 0. They stop, as in a terminal.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # Secrets such as WANDB_API_KEY come from the environment or a git-ignored .env, never from
    # configs, so they never reach a config file, log or run directory.
    load_dotenv(find_dotenv(usecwd=True))
    escape_unencodable()


def _launch(name: str):
    import hydra
    import yaml
    from hydra.core.hydra_config import HydraConfig
    from hydra.errors import CompactHydraException, OverrideParseException
    from omegaconf import OmegaConf

    from .launch import run_stamp
    from .upstream import hydra_error_line, listing_config_groups_once, no_trial_completed

    prepare()
    # Run directory names: ${now:...} that all torchrun ranks agree on.
    OmegaConf.register_new_resolver("run_stamp", run_stamp, use_cache=True, replace=True)
    if {"--help", "-h"} & set(sys.argv[1:]):
        listing_config_groups_once()
    if "--info" in sys.argv[1:]:  # Hydra logs its report: into a closed pipe, a traceback a line
        logging.raiseExceptions = False

    @hydra.main(version_base="1.3", config_path=config_dir(), config_name=name)
    def main(cfg):
        return run_task(name, cfg, HydraConfig.get().runtime.output_dir)

    # Hydra reports a bad override or config choice in five lines or more; with
    # HYDRA_FULL_ERROR it raises instead, and the user gets one line. Set by the user, the
    # variable keeps its meaning: Hydra's own report, with the traceback.
    users_choice = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        return main()
    except BrokenPipeError:  # what reads the output went away (train.py --help | head): done
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # for the exit's flush
        sys.exit(1)
    except CompactHydraException as error:
        if users_choice:
            raise
        line = with_options(hydra_error_line(error))
        if isinstance(error, OverrideParseException):
            line = unreadable_override(error.override, line)
        exit_with_error(line)
    except yaml.YAMLError as error:  # a config file edited into something that is not YAML
        if users_choice:
            raise
        exit_with_error(yaml_error_line(error))
    except ValueError as error:
        if users_choice or not no_trial_completed(error):
            raise
        exit_with_error(
            "the sweep has no trial to report: each one failed (see its line above), or "
            "hydra.sweeper.n_trials was below 1"
        )


def train():
    return _launch("train")


def evaluate():
    return _launch("eval")


def export_model():
    return _launch("export")


def optimize():
    return _launch("optimize")


def predict() -> None:
    model_path_for_model()
    run = plain_run("predict", sys.argv[1:], Path(config_dir()))
    if run is None:
        return _launch("predict")
    prepare()
    run.start()
    # Nothing returned: a console script exits with what its function returns.
    run_task("predict", run.config, str(run.run_dir))


def serve():
    model_path_for_model()
    return _launch("serve")


def model_path_for_model() -> None:
    # Hydra reads `model=...` as a choice in the training config group `model`, so predict's and
    # serve's key is `model_path`; `model=<path>` is accepted as its short form.
    sys.argv = [f"model_path={arg[6:]}" if arg.startswith("model=") else arg for arg in sys.argv]
