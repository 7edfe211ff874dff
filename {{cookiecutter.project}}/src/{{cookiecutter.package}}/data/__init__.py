from .base import ContractDataModule
from .digits import DigitsDataModule
from .images import ImagesDataModule
from .loaders import InMemoryDataset
from .table import TableDataModule
from .text import TextDataModule

__all__ = [
    "ContractDataModule",
    "DigitsDataModule",
    "ImagesDataModule",
    "InMemoryDataset",
    "TableDataModule",
    "TextDataModule",
]
