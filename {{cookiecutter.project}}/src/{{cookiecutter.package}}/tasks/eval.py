"""Evaluation: test a trained checkpoint on the test split and write metrics.json."""

from pathlib import Path

from omegaconf import DictConfig
from pytorch_lightning.utilities.model_helpers import is_overridden

from ..builders import build_trained, build_trainer
from ..console import UserError
from ..launch import stops_by_signal
from ..options import EvalOptions, validated
from ..records import log_metrics, plain_metrics, write_json


def evaluate(cfg: DictConfig) -> dict:
    options = validated(EvalOptions, cfg)
    # The checkpoint knows its model and data; `data=...` or `+data.<key>=...` evaluates elsewhere.
    model, datamodule = build_trained(options.ckpt_path, cfg.allowed_targets, cfg.get("data"))
    if not is_overridden("test_step", model):  # a module of the user's own may have none
        raise UserError(
            f"{type(model).__name__} defines no test_step, which eval runs: give it one that "
            "logs its test metrics"
        )
    trainer = build_trainer(cfg)
    with stops_by_signal(
        trainer, "evaluation", "nothing was written; rerun the command to evaluate"
    ):
        trainer.test(model, datamodule=datamodule)
    metrics = plain_metrics(trainer.callback_metrics) | {"ckpt_path": str(cfg.ckpt_path)}
    write_json(Path(cfg.paths.output_dir) / "metrics.json", metrics)
    log_metrics(metrics)
    return metrics
