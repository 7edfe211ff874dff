"""Training: fit, test the best checkpoint, write metrics.json."""

from pathlib import Path

import pytorch_lightning as pl
from omegaconf import DictConfig

from .utils.checkpoint import load_checkpoint
from .utils.instantiate import build_datamodule, build_model, build_trainer
from .utils.metadata import record_run
from .utils.run import plain_metrics, write_json


def train(cfg: DictConfig) -> float | None:
    """Runs one training job and returns the metric named by `optimized_metric`, for sweeps."""
    if cfg.ckpt_path:
        load_checkpoint(cfg.ckpt_path)  # fails early, with one line, on a bad or unsafe file
    pl.seed_everything(cfg.seed, workers=True)
    datamodule = build_datamodule(cfg)
    model = build_model(cfg)
    trainer = build_trainer(cfg)
    record_run(cfg, model, trainer)  # config tree, run.json, hyperparameters to every logger

    trainer.fit(model, datamodule=datamodule, ckpt_path=cfg.ckpt_path, weights_only=True)
    metrics = plain_metrics(trainer.callback_metrics)

    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    if cfg.test:
        # Without a checkpoint callback the weights from the end of training are tested.
        trainer.test(model, datamodule=datamodule, ckpt_path=best or None, weights_only=True)
        metrics |= plain_metrics(trainer.callback_metrics)
    metrics["best_model_path"] = best
    write_json(Path(cfg.paths.output_dir) / "metrics.json", metrics)
    return metrics.get(cfg.optimized_metric)
