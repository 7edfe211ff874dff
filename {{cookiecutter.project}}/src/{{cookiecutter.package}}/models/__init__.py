from .base import NetModule
from .classifier import Classifier
from .nets import MLP, SmallCNN, TokenBag
from .regressor import Regressor
from .transformer import Transformer

__all__ = ["MLP", "Classifier", "NetModule", "Regressor", "SmallCNN", "TokenBag", "Transformer"]
