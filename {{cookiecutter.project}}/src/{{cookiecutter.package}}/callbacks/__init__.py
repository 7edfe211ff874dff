from .confusion_matrix import ConfusionMatrixImage
from .curves import PlotCurves
from .diagnostics import TrainingDiagnostics
from .progress import ProgressBar

__all__ = ["ConfusionMatrixImage", "PlotCurves", "ProgressBar", "TrainingDiagnostics"]
