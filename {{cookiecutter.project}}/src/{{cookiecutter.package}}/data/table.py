"""A CSV, Parquet or JSON Lines table, one row per sample: `python train.py data=table
data.path=<file> data.target=<column>`."""

import pandas as pd
import torch

from .. import targets
from ..columns import read_either_way
from ..console import UserError, counted
from ..contract import Contract
from ..kinds import table
from ..options import Columns, validated
from .base import ContractDataModule, note
from .loaders import InMemoryDataset


def with_target(frame: pd.DataFrame, target: str, drop: bool) -> pd.DataFrame:
    """The rows that hold a target; those that do not are dropped if `drop`
    (data.drop_missing_target) is set, and refused otherwise. Rows keep their numbers."""
    missing = frame[target].isna()
    if not missing.any():
        return frame
    rows = counted(missing.sum(), "row")
    if not drop:
        raise UserError(
            f"target column {target!r} is empty in {rows} (the first: row {missing.idxmax()}); "
            "fill them, or drop them with data.drop_missing_target=true"
        )
    note(f"dropped {rows} without a target (data.drop_missing_target=true)")
    return frame[~missing]


def without_unnamed(frame: pd.DataFrame, keep: list[str]) -> pd.DataFrame:
    """The table without the columns whose header is empty (pandas names them "Unnamed: 1"),
    such as the row numbers that DataFrame.to_csv writes unless index=False: a row's number is
    no feature, and on sorted rows it gives the target away. Those in `keep` stay."""
    unnamed = [name for name in frame if str(name).startswith("Unnamed: ") and name not in keep]
    if unnamed:
        note(
            f"left out {counted(len(unnamed), 'column')} with no name in the header "
            f"({', '.join(unnamed)}), as the row numbers that DataFrame.to_csv writes; give a "
            "column a name to learn from it"
        )
    return frame.drop(columns=unnamed)


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
        drop_missing_target: bool = False,
        **common,
    ):
        validated(Columns, {"features": features, "categorical": categorical}, prefix="data.")
        super().__init__(**common)

    def read(self) -> pd.DataFrame:
        path, target = self.hparams.path, self.hparams.target
        if not path or not target:
            raise UserError(
                "data=table needs data.path=<.csv, .parquet or .jsonl file> and "
                "data.target=<column>"
            )
        frame = table.read_table(path)
        frame = without_unnamed(frame, [target, *(self.hparams.features or [])])
        table.require_columns(frame, [target], f"{path} (data.target)")
        frame = with_target(frame, target, self.hparams.drop_missing_target)
        table.require_plain(frame, [target], f"{path} (data.target)")
        table.require_plain(frame, self.features(frame)[0], f"{path} (data.features)")
        self.split(len(frame))
        return frame

    def features(self, frame: pd.DataFrame) -> tuple[list[str], list[str]]:
        """The input columns and those of them to read as categories, checked."""
        path, target = self.hparams.path, self.hparams.target
        features = list(self.hparams.features or [c for c in frame.columns if c != target])
        categorical = list(self.hparams.categorical or [])
        table.require_columns(
            frame, features + categorical, f"{path} (data.features, data.categorical)"
        )
        if target in features:
            raise UserError(f"data.features holds the target column {target!r}; leave it out")
        if target in categorical:
            raise UserError(
                f"data.categorical names the target column {target!r}; leave it out, and pass "
                "data.task=classification to read its numbers as classes"
            )
        repeated = next((name for name in features if features.count(name) > 1), None)
        if repeated is not None:
            raise UserError(f"data.features names {repeated!r} twice; name each column once")
        if not features:  # a model of no inputs would train, and learn only the class shares
            raise UserError(
                f"{path} has no column but the target {target!r}: add the columns to learn from"
            )
        unused = sorted(set(categorical) - set(features))
        if unused:
            raise UserError(f"data.categorical names {unused[0]!r}, which is not in data.features")
        return features, categorical

    def fit(self, frame: pd.DataFrame) -> Contract:
        train = self.indices["train"]
        name = self.hparams.target
        target = table.fit_target(frame[name], name, self.hparams.task, self.hparams.units, train)
        preprocessing = table.fit(frame.iloc[train], *self.features(frame))
        for column in preprocessing.columns:
            values = frame[column.name].iloc[train]
            if isinstance(column, table.Datetime) and read_either_way(values, column.format):
                note(
                    f"column {column.name!r} holds dates such as {values.dropna().iloc[0]!r}, "
                    f"read month first ({column.format}), which read day first too: write them "
                    "as 2024-03-01 if the day comes first"
                )
        return self.declare(preprocessing, target)

    def apply(self, frame: pd.DataFrame, contract: Contract) -> dict:
        task = targets.get(contract.target.task)
        # A copy: pandas may share its memory, which torch would warn about.
        labels = torch.tensor(task.encode(frame[self.hparams.target], contract.target))
        # Split by split: the encoded rows are held once, in their split's dataset.
        return {
            name: InMemoryDataset(self.encode(frame.iloc[index], contract), labels[index])
            for name, index in self.indices.items()
        }

    def encode(self, rows: pd.DataFrame, contract: Contract) -> torch.Tensor:
        return torch.from_numpy(table.encode(rows, contract.preprocessing, self.hparams.path))
