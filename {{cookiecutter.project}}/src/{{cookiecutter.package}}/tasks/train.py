"""Training: fit, test the best checkpoint, write metrics.json."""

import gc
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytorch_lightning as pl
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.utilities import rank_zero_only
from pytorch_lightning.utilities.exceptions import MisconfigurationException
from pytorch_lightning.utilities.model_helpers import is_overridden
from torch.utils.data import DataLoader, IterableDataset

from ..builders import build_datamodule, build_model, build_trainer, check_fits, seed_everything
from ..checkpoints import check_resumable, load_checkpoint, resume_path
from ..console import UserError, counted, show
from ..launch import (
    output_setting,
    relaunches_script,
    resume_hint,
    run_job_in_subprocess,
    stops_by_signal,
    swept_value,
)
from ..models.base import NetModule
from ..options import check_train_options
from ..records import log_metrics, plain_metrics, record_run, write_json
from ..run_dir import earlier_metrics, finished, flatten
from ..upstream import restored_past_max_epochs

say = rank_zero_only(show)


def train(cfg: DictConfig) -> float | None:
    """Runs one training job and returns the metric named by `optimized_metric`, for sweeps.

    metrics.json is written once fitting ends and again with the test metrics. Rerun in its own
    directory, a run that was stopped while testing is tested again, and a finished one is left
    as it is: no metric is ever lost.
    """
    check_train_options(cfg)
    output_dir = Path(cfg.paths.output_dir)
    metrics = earlier_metrics(output_dir)
    if finished(metrics, cfg.test):
        value = swept_value(metrics, cfg.optimized_metric)
        say(f"run {output_dir} is complete ({cfg.optimized_metric}={value}); to train again, "
            f"choose a new {output_setting(output_dir)}")  # fmt: skip
        return value
    ckpt_path = resume_path(cfg)  # ckpt_path, else the run's own last.ckpt (auto_resume)
    seed_everything(cfg.seed)
    trainer = build_trainer(cfg)
    if relaunches_script(trainer):  # a multirun job with DDP: see launch.py
        return run_job_in_subprocess(cfg.optimized_metric)
    resumed = load_checkpoint(ckpt_path) if ckpt_path else None
    datamodule = build_datamodule(cfg, resumed)
    model = build_model(cfg, datamodule)
    log_every_epoch(trainer, datamodule)
    if resumed:  # before Lightning's own loading: one line for other data or another model
        check_resumable(resumed, datamodule.contract, ckpt_path)
        check_fits(model, resumed["state_dict"], ckpt_path)
        note_other_settings(resumed, cfg.model, ckpt_path)
    del resumed  # Lightning loads the weights into the model itself: no copy held while training
    if isinstance(model, NetModule):  # what the optimizer refuses, before the loggers write
        model.configure_optimizers()
    record_run(cfg, model, trainer)  # config tree, run.json, hyperparameters to every logger

    resume = resume_hint(output_dir)
    stopped_early = None
    if not metrics:  # not fitted yet
        # The collector's first full pass since the freeze at import (cli.py) goes through every
        # object made since, the model, data and trainer's: now, rather than as a stall of one
        # step in an early epoch (40 ms on the example); training then seldom needs another.
        gc.collect()
        with stops_by_signal(trainer, "training", resume), lightning_refusals(trainer, ckpt_path):
            trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
        stopped_early = early_stop(trainer)  # before testing, which resets the callback
        metrics = best_checkpoint(trainer) | plain_metrics(trainer.callback_metrics)
        write_json(output_dir / "metrics.json", metrics)
    if cfg.test and testable(model):
        # Without a checkpoint callback the weights from the end of training are tested.
        best = metrics["best_model_path"] or None
        with stops_by_signal(trainer, "testing", resume):
            trainer.test(model, datamodule=datamodule, ckpt_path=best, weights_only=True)
        metrics |= plain_metrics(trainer.callback_metrics)
        write_json(output_dir / "metrics.json", metrics)
    log_metrics(metrics)
    if stopped_early:
        say(stopped_early)
    say(f"run directory: {output_dir}")
    return swept_value(metrics, cfg.optimized_metric)


def note_other_settings(checkpoint: dict, model: DictConfig, path: str) -> None:
    """A note when the model's settings differ from those of the checkpoint that training
    resumes: Lightning restores the optimizer's and the scheduler's state from it, the learning
    rate among it, whatever the config says now."""
    then = dict(flatten(checkpoint["config"].get("model") or {}))
    now = dict(flatten(OmegaConf.to_container(model, resolve=True)))
    changed = [key for key in sorted(then.keys() | now.keys()) if then.get(key) != now.get(key)]
    if changed:
        key, differ = changed[0], "differs" if len(changed) == 1 else "differ"
        say(
            f"note: model.{key}={now.get(key)} here, {then.get(key)} in {path} "
            f"({counted(len(changed), 'setting')} of the model {differ}): resuming restores the "
            "optimizer's and the scheduler's state from it, their learning rate too"
        )


def log_every_epoch(trainer: pl.Trainer, datamodule: pl.LightningDataModule) -> None:
    """Lowers `trainer.log_every_n_steps` to the number of training batches of an epoch shorter
    than it (a small table, a run with limit_train_batches), as Lightning advises in a warning:
    each epoch then logs its training metrics at least once."""
    loader = datamodule.train_dataloader()
    # An iterable dataset (data=stream) may count its length from the ranks, which do not exist
    # yet: LitData takes a rank's share from WORLD_SIZE, which only the processes that Lightning
    # starts have. Every rank must take the same logging steps, so its interval stays as set.
    if not isinstance(loader, DataLoader) or isinstance(loader.dataset, IterableDataset):
        return
    length = len(loader)
    limit = trainer.limit_train_batches
    per_rank = math.ceil(length / trainer.world_size)  # each rank takes its share
    batches = min(limit, per_rank) if isinstance(limit, int) else int(per_rank * limit)
    if 0 < batches < trainer.log_every_n_steps:
        trainer.log_every_n_steps = batches


def best_checkpoint(trainer: pl.Trainer) -> dict:
    """best.ckpt's path and the best value of the metric it watches, as `<monitor>_best` (sweeps
    optimize it): for a LightningModule of the user's own, which may not log it itself."""
    callback = trainer.checkpoint_callback
    if callback is None:
        return {"best_model_path": ""}
    best = {"best_model_path": callback.best_model_path}
    if callback.monitor and callback.best_model_score is not None:
        best[f"{callback.monitor}_best"] = callback.best_model_score.item()
    return best


@contextmanager
def lightning_refusals(trainer: pl.Trainer, ckpt_path: str | None) -> Iterator[None]:
    """One line for what Lightning refuses once fitting starts: a checkpoint that is further on
    than the run may go, a module of the user's own without `configure_optimizers`."""
    try:
        yield
    except MisconfigurationException as error:
        if not restored_past_max_epochs(error):
            raise UserError(f"Lightning refuses the model: {error}") from None
        raise UserError(
            f"{ckpt_path} is at epoch {trainer.current_epoch}, past trainer.max_epochs="
            f"{trainer.max_epochs}: raise trainer.max_epochs to train it further, or evaluate it "
            f"with eval.py ckpt_path={ckpt_path}"
        ) from None


def testable(model: pl.LightningModule) -> bool:
    """Whether the model has a test step; a module of the user's own may not, and is then
    trained but not tested, as with test=false."""
    if is_overridden("test_step", model):
        return True
    say(f"note: {type(model).__name__} defines no test_step: trained, not tested")
    return False


def early_stop(trainer: pl.Trainer) -> str | None:
    """Why early stopping ended training, if it did."""
    stopper = trainer.early_stopping_callback
    if stopper and stopper.stopping_reason_message:
        return (
            f"stopped early after epoch {stopper.stopped_epoch}: {stopper.stopping_reason_message}"
        )
    return None
