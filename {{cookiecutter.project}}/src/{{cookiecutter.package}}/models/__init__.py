from .base import NetModule
from .classifier import Classifier
from .nets import MLP, SmallCNN, TokenBag
from .pretrained import Pretrained
from .regressor import Regressor
from .transformer import Transformer

__all__ = [
    "MLP",
    "Classifier",
    "NetModule",
    "Pretrained",
    "Regressor",
    "SmallCNN",
    "TokenBag",
    "Transformer",
]
