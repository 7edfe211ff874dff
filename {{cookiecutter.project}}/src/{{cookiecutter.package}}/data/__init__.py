from .digits import DigitsDataModule, InMemoryDataset

__all__ = ["DigitsDataModule", "InMemoryDataset"]
