"""What train, eval and export refuse before they import Lightning, which alone takes seconds:
their options, the data options and the checkpoint (torch only once its file has passed the
checks that need none). The CLI runs these before it imports the task; the tasks check the same
with the same functions as they go, for callers in process.
"""

from pathlib import Path

from omegaconf import DictConfig

from .checkpoints import resume_path, trained_configs
from .console import UserError
from .files import STAGING
from .options import (
    DATA,
    EvalOptions,
    ExportOptions,
    check_seed,
    check_train_options,
    validated,
)
from .run_dir import earlier_metrics, finished, name_too_long, unwritable


def train_input(cfg: DictConfig) -> None:
    check_train_options(cfg)
    if finished(earlier_metrics(Path(cfg.paths.output_dir)), cfg.test):
        return  # nothing to check: the task only says that the run is complete
    resume_path(cfg)
    check_seed(cfg.seed)
    validated(DATA, cfg.data, prefix="data.")


def eval_input(cfg: DictConfig) -> None:
    options = validated(EvalOptions, cfg)
    trained_configs(options.ckpt_path, cfg.allowed_targets, cfg.get("data"))


def export_input(cfg: DictConfig) -> None:
    options = export_options(cfg)
    trained_configs(options.ckpt_path, cfg.allowed_targets, cfg.get("data"))


def export_options(cfg: DictConfig) -> ExportOptions:
    """The export's options, checked before anything slow runs."""
    import onnx  # the newest opset it knows bounds `opset`; not needed before an export

    options = validated(ExportOptions, cfg, newest_opset=onnx.defs.onnx_opset_version())
    problem = name_too_long(Path(options.output_dir), "output_dir", STAGING)
    if problem:
        raise UserError(problem)
    if Path(options.output_dir).is_file():
        raise UserError(f"output_dir={options.output_dir} is a file; pass a folder for the export")
    # Beside output_dir: the staging folder, and the export once it passed.
    problem = unwritable(Path(options.output_dir).absolute().parent, setting="output_dir=...")
    if problem:
        raise UserError(problem)
    return options
