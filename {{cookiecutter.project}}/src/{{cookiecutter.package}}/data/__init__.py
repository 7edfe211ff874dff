from .base import ContractDataModule
from .digits import DigitsDataModule
from .loaders import InMemoryDataset

__all__ = ["ContractDataModule", "DigitsDataModule", "InMemoryDataset"]
