"""A CSV or Parquet table, one row per sample: `python train.py data=table data.path=<file>
data.target=<column>`."""

import torch

from ..console import UserError
from ..preprocess import (
    encode_table,
    encode_target,
    fit_table,
    fit_target,
    read_table,
    require_columns,
    table_contract,
)
from .base import ContractDataModule
from .loaders import InMemoryDataset


class TableDataModule(ContractDataModule):
    """Rows of a table as feature vectors: numeric columns standardized, categorical ones
    one-hot encoded, missing values imputed, all from the training split. The target is class
    labels or a number (regression, standardized). Tables are small: the encoded rows are held
    in memory and batches sliced."""

    kind = "table"

    def __init__(
        self,
        path: str | None = None,
        target: str | None = None,
        features: list[str] | None = None,
        categorical: list[str] | None = None,
        task: str | None = None,
        units: str | None = None,
        **common,
    ):
        super().__init__(**common)

    def read(self):
        path, target = self.hparams.path, self.hparams.target
        if not path or not target:
            raise UserError(
                "data=table needs data.path=<.csv or .parquet file> and data.target=<column>"
            )
        frame = read_table(path)
        require_columns(frame, [target], f"{path} (data.target)")
        features = list(self.hparams.features or [c for c in frame.columns if c != target])
        categorical = list(self.hparams.categorical or [])
        require_columns(frame, features + categorical, f"{path} (data.features, data.categorical)")
        if target in features:
            raise UserError(f"data.features holds the target column {target!r}; leave it out")
        unused = sorted(set(categorical) - set(features))
        if unused:
            raise UserError(f"data.categorical names {unused[0]!r}, which is not in data.features")

        indices = self.split(len(frame))
        train = indices["train"]
        target_spec = self.fitted(
            "target",
            lambda: fit_target(
                frame[target], target, self.hparams.task, self.hparams.units, train
            ),
        )
        preprocessing = self.fitted(
            "preprocessing", lambda: fit_table(frame.iloc[train], features, categorical)
        )
        inputs = torch.tensor(encode_table(frame, preprocessing, str(path)))
        targets = torch.tensor(encode_target(frame[target], target_spec))
        splits = {
            name: InMemoryDataset(inputs[index], targets[index]) for name, index in indices.items()
        }
        return splits, table_contract(preprocessing, target_spec)
