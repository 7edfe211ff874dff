from .confusion_matrix import ConfusionMatrixImage
from .curves import PlotCurves
from .diagnostics import TrainingDiagnostics

__all__ = ["ConfusionMatrixImage", "PlotCurves", "TrainingDiagnostics"]
