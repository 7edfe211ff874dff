from .classifier import Classifier
from .nets import MLP, SmallCNN

__all__ = ["MLP", "Classifier", "SmallCNN"]
