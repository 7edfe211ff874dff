"""Texts to classify or score: `python train.py data=text data.path=<csv, parquet or jsonl>
data.text=<column> data.target=<column>`, or `data=text data.root=<folder>` with one subfolder
of .txt files per class."""

from pathlib import Path

import pandas as pd
import torch

from .. import targets
from ..console import UserError
from ..contract import Contract
from ..kinds import TABLE_SUFFIXES, table, text
from ..targets import classification
from .base import ContractDataModule, class_name
from .loaders import InMemoryDataset
from .table import with_target

# The column of a folder's texts, as predict and serve name it in rows.
FOLDER_COLUMN = "text"


class TextDataModule(ContractDataModule):
    """Texts as token ids from a tokenizer fitted on the training split; the target is class
    labels (a table's column, as for tables, or the folder's names) or a number (regression,
    standardized). The token ids are held in memory and batches sliced."""

    kind = "text"
    adopts_preprocessing = True

    def __init__(
        self,
        path: str | None = None,
        text: str | None = None,
        target: str | None = None,
        root: str | None = None,
        task: str | None = None,
        units: str | None = None,
        drop_missing_target: bool = False,
        vocab_size: int = 20000,
        max_length: int = 128,
        lowercase: bool = True,
        normalization: str = "NFKC",
        **common,
    ):
        super().__init__(**common)

    def read(self) -> pd.DataFrame:
        """The texts and their targets, as two columns `text` and `target`."""
        path, root = self.hparams.path, self.hparams.root
        if path and root:
            raise UserError(
                f"data.path={path} and data.root={root} are both set; data=text reads one: "
                "set the other to null"
            )
        if not path and not root:
            raise UserError(
                "data=text needs data.path=<csv, parquet or jsonl> with data.text=<column> and "
                "data.target=<column>, or data.root=<folder with a subfolder of .txt per class>"
            )
        frame = self.read_table(Path(path)) if path else self.read_folder(Path(root))
        self.split(len(frame))
        return frame

    def read_table(self, path: Path) -> pd.DataFrame:
        column, target = self.hparams.text, self.hparams.target
        if not column or not target:
            raise UserError(
                "data=text with data.path needs data.text=<column> and data.target=<column>"
            )
        if column == target:  # the model would read its answers, and score 100 %
            raise UserError(
                f"data.text and data.target both name column {column!r}: point data.text at the "
                "column of texts"
            )
        if not path.is_file():
            raise UserError(
                f"data.path={path} does not exist; pass a .csv, .parquet or .jsonl file"
            )
        if path.suffix.lower() not in TABLE_SUFFIXES:
            raise UserError(f"data.path={path} is not {', '.join(TABLE_SUFFIXES)}")
        frame = table.read_table(path)
        table.require_columns(frame, [target], f"{path} (data.target)")
        frame = with_target(frame, target, self.hparams.drop_missing_target)
        texts = text.text_column(frame, column, f"{path} (data.text)")
        return pd.DataFrame({"text": texts, "target": frame[target].to_numpy()})

    def read_folder(self, root: Path) -> pd.DataFrame:
        if not root.is_dir():
            raise UserError(
                f"data.root={root} is not a folder; pass a folder with a subfolder of .txt "
                "files per class"
            )
        if self.hparams.task == "regression":
            raise UserError(
                "a folder of texts gives class labels; for numbers use a table with data.path"
            )
        rows = [
            (text.read_text(file), class_name(folder))
            for folder in sorted(p for p in root.iterdir() if p.is_dir())
            for file in text.text_files(folder)
        ]
        if not rows:
            raise UserError(f"data.root={root} holds no subfolder with .txt files")
        return pd.DataFrame(rows, columns=["text", "target"])

    @property
    def column(self) -> str:
        return self.hparams.text if self.hparams.path else FOLDER_COLUMN

    def fit(self, frame: pd.DataFrame) -> Contract:
        train = self.indices["train"]
        if self.hparams.root:
            target = classification.fit(sorted(frame["target"].unique()))
        else:
            name = self.hparams.target
            values = frame["target"].rename(name)
            target = table.fit_target(values, name, self.hparams.task, self.hparams.units, train)
        preprocessing = text.fit(
            list(frame["text"].iloc[train]),
            self.column,
            self.hparams.vocab_size,
            self.hparams.max_length,
            self.hparams.lowercase,
            self.hparams.normalization,
        )
        return self.declare(preprocessing, target)

    def apply(self, frame: pd.DataFrame, contract: Contract) -> dict:
        task = targets.get(contract.target.task)
        labels = torch.tensor(task.encode(frame["target"], contract.target))
        where = self.hparams.path or self.hparams.root
        return {
            name: InMemoryDataset(
                torch.from_numpy(
                    text.encode(list(frame["text"].iloc[index]), contract.preprocessing, where)
                ),
                labels[index],
            )
            for name, index in self.indices.items()
        }
