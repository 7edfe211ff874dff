"""Builds the objects every task needs from its config: train, eval and export share one recipe."""

import importlib

import pytorch_lightning as pl
from hydra.utils import instantiate
from omegaconf import DictConfig, open_dict
from pytorch_lightning.callbacks import (
    Checkpoint,
    EarlyStopping,
    LearningRateMonitor,
    ModelSummary,
    ProgressBar,
)

from .checkpoints import ConfigInCheckpoint, check_fits, trained_configs
from .console import UserError

# Loggers whose package is an optional extra of this project, by class name; extra = package.
LOGGER_EXTRAS = {"WandbLogger": "wandb", "MLFlowLogger": "mlflow"}
# Trainer flags that switch a feature off, and the callbacks that provide it. Lightning refuses a
# progress bar or checkpoint callback when its flag is off, and keeps a summary callback printing.
FEATURE_FLAGS = {
    "enable_progress_bar": ProgressBar,
    "enable_model_summary": ModelSummary,
    "enable_checkpointing": Checkpoint,
}


def instantiate_group(group: DictConfig | None) -> list:
    """Every entry of a group like `callbacks` or `logger` that names a `_target_`."""
    if not group:
        return []
    if "_target_" in group:
        return [instantiate(group)]
    return [instantiate(entry) for entry in group.values() if entry and "_target_" in entry]


def build_datamodule(cfg: DictConfig) -> pl.LightningDataModule:
    """The datamodule, set up, with the shapes that only the data knows (number of classes,
    of features) written into `cfg.data`, where the model's config reads them."""
    datamodule = instantiate(cfg.data, _convert_="all")  # plain hyperparameters in checkpoints
    # Before the model exists, and in every process: the networks are built for these shapes.
    # A prepare_data that downloads must therefore leave files that are already there alone.
    datamodule.prepare_data()
    datamodule.setup()
    with open_dict(cfg.data):
        cfg.data.update(
            {key: value for key, value in datamodule.shapes.items() if value is not None}
        )
    return datamodule


def build_model(cfg: DictConfig) -> pl.LightningModule:
    return instantiate_model(cfg.model)


def instantiate_model(config: DictConfig | dict) -> pl.LightningModule:
    # The model builds its parts itself from plain dicts, which it saves as hyperparameters.
    return instantiate(config, _recursive_=False, _convert_="all")


def build_trained(
    path: str, allowed: list[str], data: DictConfig | None = None
) -> tuple[pl.LightningModule, pl.LightningDataModule]:
    """A checkpoint's model in eval mode, and the data it was trained on (or `data`), built from
    the configs the checkpoint records once every target in them is allowed."""
    checkpoint, model_config, data_config = trained_configs(path, allowed, data)
    model = instantiate_model(model_config)
    check_fits(model, checkpoint["state_dict"], path)
    model.load_state_dict(checkpoint["state_dict"])
    return model.eval(), instantiate(data_config)


def require_logger_packages(group: DictConfig | None) -> None:
    """One clear line, before anything runs, when a logger's optional package is missing."""
    entries = [group] if group and "_target_" in group else (group or {}).values()
    for entry in entries:
        extra = LOGGER_EXTRAS.get(str((entry or {}).get("_target_", "")).rsplit(".", 1)[-1])
        if not extra:
            continue
        try:
            importlib.import_module(extra)
        except ModuleNotFoundError as error:
            if error.name != extra:  # installed but broken: the original error says more
                raise
            raise UserError(
                f'logger {extra} needs the {extra} package: pip install -e ".[{extra}]"'
            ) from None


def build_callbacks(cfg: DictConfig, with_logger: bool) -> list[pl.Callback]:
    """The configured callbacks, less those that the trainer's settings leave nothing to do."""
    callbacks = instantiate_group(cfg.get("callbacks"))
    if "model" in cfg:  # training: eval and export rebuild model and data from the checkpoint
        callbacks.append(ConfigInCheckpoint(cfg.model, cfg.data))
    if cfg.trainer.get("limit_val_batches") == 0 and any(
        isinstance(c, EarlyStopping) and c.monitor.startswith("val/") for c in callbacks
    ):
        raise UserError(
            "trainer.limit_val_batches=0 turns validation off, but early stopping watches a "
            "validation metric: add ~callbacks.early_stopping"
        )
    # `trainer.enable_progress_bar=false` and the like turn off the callbacks that provide it;
    # without a logger, the learning-rate monitor (which only logs) goes too.
    off = [kind for flag, kind in FEATURE_FLAGS.items() if cfg.trainer.get(flag) is False]
    if not with_logger:
        off.append(LearningRateMonitor)
    return [callback for callback in callbacks if not isinstance(callback, tuple(off))]


def build_trainer(cfg: DictConfig) -> pl.Trainer:
    require_logger_packages(cfg.get("logger"))
    loggers = instantiate_group(cfg.get("logger"))
    return instantiate(
        cfg.trainer, callbacks=build_callbacks(cfg, bool(loggers)), logger=loggers or False
    )
