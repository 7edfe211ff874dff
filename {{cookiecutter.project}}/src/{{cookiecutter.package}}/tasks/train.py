"""Training: fit, test the best checkpoint, write metrics.json."""

from pathlib import Path

import pytorch_lightning as pl
from omegaconf import DictConfig
from pytorch_lightning.utilities import rank_zero_only

from ..builders import build_datamodule, build_model, build_trainer
from ..checkpoints import check_fits, load_checkpoint, resume_path
from ..launch import relaunches_script, run_job_in_subprocess
from ..records import plain_metrics, record_run, write_json


def train(cfg: DictConfig) -> float | None:
    """Runs one training job and returns the metric named by `optimized_metric`, for sweeps."""
    ckpt_path = resume_path(cfg)  # ckpt_path, else the run's own last.ckpt (auto_resume)
    pl.seed_everything(cfg.seed, workers=True)
    trainer = build_trainer(cfg)
    if relaunches_script(trainer):  # a multirun job with DDP: see launch.py
        return run_job_in_subprocess(cfg.optimized_metric)
    datamodule = build_datamodule(cfg)
    model = build_model(cfg)
    if ckpt_path:  # before Lightning's own loading: one line for weights of another model
        check_fits(model, load_checkpoint(ckpt_path)["state_dict"], ckpt_path)
    record_run(cfg, model, trainer)  # config tree, run.json, hyperparameters to every logger

    trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
    metrics = plain_metrics(trainer.callback_metrics)

    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    if cfg.test:
        # Without a checkpoint callback the weights from the end of training are tested.
        trainer.test(model, datamodule=datamodule, ckpt_path=best or None, weights_only=True)
        metrics |= plain_metrics(trainer.callback_metrics)
    metrics["best_model_path"] = best
    output_dir = Path(cfg.paths.output_dir)
    write_json(output_dir / "metrics.json", metrics)
    say_how_it_ended(trainer, output_dir)
    return metrics.get(cfg.optimized_metric)


@rank_zero_only
def say_how_it_ended(trainer: pl.Trainer, output_dir: Path) -> None:
    stopper = trainer.early_stopping_callback
    if stopper and stopper.stopping_reason_message:
        print(
            f"stopped early after epoch {stopper.stopped_epoch}: {stopper.stopping_reason_message}"
        )
    print(f"run directory: {output_dir}")
