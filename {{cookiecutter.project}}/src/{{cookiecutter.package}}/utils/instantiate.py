"""Builds the objects every task needs from its config: train, eval and export share one recipe."""

import importlib

import pytorch_lightning as pl
from hydra.utils import instantiate
from omegaconf import DictConfig

from .errors import UserError

# Loggers whose package is an optional extra of this project, by class name; extra = package.
LOGGER_EXTRAS = {"WandbLogger": "wandb", "MLFlowLogger": "mlflow"}


def instantiate_group(group: DictConfig | None) -> list:
    """Every entry of a group like `callbacks` or `logger` that names a `_target_`."""
    if not group:
        return []
    if "_target_" in group:
        return [instantiate(group)]
    return [instantiate(entry) for entry in group.values() if entry and "_target_" in entry]


def build_datamodule(cfg: DictConfig) -> pl.LightningDataModule:
    return instantiate(cfg.data)


def build_model(cfg: DictConfig) -> pl.LightningModule:
    # The model builds its parts itself from plain dicts, which it saves as hyperparameters.
    return instantiate(cfg.model, _recursive_=False, _convert_="all")


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


def build_trainer(cfg: DictConfig) -> pl.Trainer:
    require_logger_packages(cfg.get("logger"))
    return instantiate(
        cfg.trainer,
        callbacks=instantiate_group(cfg.get("callbacks")),
        logger=instantiate_group(cfg.get("logger")) or False,
    )
