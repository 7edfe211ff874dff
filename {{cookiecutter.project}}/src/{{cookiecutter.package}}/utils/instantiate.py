"""Builds the objects every task needs from its config, so train, eval and export share one recipe."""

import pytorch_lightning as pl
from hydra.utils import instantiate
from omegaconf import DictConfig


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


def build_trainer(cfg: DictConfig) -> pl.Trainer:
    return instantiate(
        cfg.trainer,
        callbacks=instantiate_group(cfg.get("callbacks")),
        logger=instantiate_group(cfg.get("logger")) or False,
    )
