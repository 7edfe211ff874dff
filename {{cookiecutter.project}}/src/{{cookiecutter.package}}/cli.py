"""Console entry points: Hydra parses the command line, the task modules do the work.

Task modules are imported only once a task runs, so config-only commands such as
`--help` and `--cfg job` never import torch or Lightning.
"""

import importlib
import os
import signal
import sys
from pathlib import Path

import hydra
from dotenv import find_dotenv, load_dotenv
from hydra.core.hydra_config import HydraConfig
from hydra.errors import CompactHydraException
from omegaconf import OmegaConf

from .console import UserError, cannot_write, exit_with_error, silence_noise
from .files import WRITE_ERRORS
from .launch import run_stamp
from .upstream import hydra_error_line

# The function of each task in tasks/, keyed by its module and config name in configs/.
TASKS = {
    "train": "train",
    "eval": "evaluate",
    "export": "export",
    # predict and serve import only numpy, onnxruntime, Pillow and pandas (serve: and its HTTP
    # libraries): they run where torch is not installed.
    "predict": "predict",
    "serve": "serve",
}


def config_dir() -> str:
    """The configs packaged in an installed wheel, else the project's own configs/ folder."""
    packaged = Path(__file__).parent / "configs"
    return str(packaged if packaged.is_dir() else Path(__file__).parents[2] / "configs")


def write_error(cfg, error: OSError) -> str:
    """The line for a file that could not be written: the file, if it is the run's or the
    export's (a temporary file elsewhere says nothing), and the setting that moves it."""
    run_dir = HydraConfig.get().runtime.output_dir
    output_dir = str(Path(cfg.get("output_dir") or run_dir).absolute())
    filename = str(error.filename or "")
    if output_dir != run_dir and filename.startswith(output_dir):  # also <output_dir>.staging
        return cannot_write(filename, error, "output_dir=...")
    return cannot_write(filename if filename.startswith(run_dir) else run_dir, error)


def _launch(name: str):
    function = TASKS[name]
    # A job that a script starts in the background inherits Ctrl-C ignored, and Python keeps it
    # so: train and export would then run to the end and exit 0. They stop, as in a terminal.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # Secrets such as WANDB_API_KEY come from the environment or a git-ignored .env, never from
    # configs, so they never reach a config file, log or run directory.
    load_dotenv(find_dotenv(usecwd=True))
    # Run directory names: ${now:...} that all torchrun ranks agree on.
    OmegaConf.register_new_resolver("run_stamp", run_stamp, use_cache=True, replace=True)

    @hydra.main(version_base="1.3", config_path=config_dir(), config_name=name)
    def main(cfg):
        silence_noise()
        try:
            task = getattr(importlib.import_module(f"{__package__}.tasks.{name}"), function)
            return task(cfg)
        except UserError as error:
            exit_with_error(str(error), error.exit_status)
        except KeyboardInterrupt:
            # Outside a Trainer call: the tasks say how to go on from an interrupted one.
            exit_with_error(f"{name} stopped by Ctrl-C (SIGINT)", 128 + signal.SIGINT)
        except OSError as error:
            if error.errno not in WRITE_ERRORS:
                raise
            exit_with_error(write_error(cfg, error))

    # Hydra reports a bad override or config choice in five lines or more; with
    # HYDRA_FULL_ERROR it raises instead, and the user gets one line. Set by the user, the
    # variable keeps its meaning: Hydra's own report, with the traceback.
    users_choice = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        return main()
    except CompactHydraException as error:
        if users_choice:
            raise
        exit_with_error(hydra_error_line(error))


def train():
    return _launch("train")


def evaluate():
    return _launch("eval")


def export_model():
    return _launch("export")


def predict():
    return _launch_with_model_path("predict")


def serve():
    return _launch_with_model_path("serve")


def _launch_with_model_path(name: str):
    # Hydra reads `model=...` as a choice in the training config group `model`, so predict's and
    # serve's key is `model_path`; `model=<path>` is accepted as its short form.
    sys.argv = [f"model_path={arg[6:]}" if arg.startswith("model=") else arg for arg in sys.argv]
    return _launch(name)
