"""Evaluation: test a trained checkpoint on the test split and write metrics.json."""

from pathlib import Path

from omegaconf import DictConfig

from ..builders import build_trained, build_trainer
from ..launch import stops_by_signal
from ..options import EvalOptions, validated
from ..records import log_metrics, plain_metrics, write_json


def evaluate(cfg: DictConfig) -> dict:
    options = validated(EvalOptions, cfg)
    # The checkpoint knows its model and data; `data=...` or `+data.<key>=...` evaluates elsewhere.
    model, datamodule = build_trained(options.ckpt_path, cfg.allowed_targets, cfg.get("data"))
    trainer = build_trainer(cfg)
    with stops_by_signal(
        trainer, "evaluation", "nothing was written; rerun the command to evaluate"
    ):
        trainer.test(model, datamodule=datamodule)
    metrics = plain_metrics(trainer.callback_metrics) | {"ckpt_path": str(cfg.ckpt_path)}
    write_json(Path(cfg.paths.output_dir) / "metrics.json", metrics)
    log_metrics(metrics)
    return metrics
