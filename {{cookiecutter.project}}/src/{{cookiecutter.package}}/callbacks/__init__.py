from .confusion_matrix import ConfusionMatrixImage
from .curves import PlotCurves
from .diagnostics import TrainingDiagnostics
from .finite_loss import StopOnNonFiniteLoss
from .last_checkpoint import LastCheckpoint
from .progress import ProgressBar
from .random_state import RandomState
from .regression_plots import RegressionPlots

__all__ = [
    "ConfusionMatrixImage",
    "LastCheckpoint",
    "PlotCurves",
    "ProgressBar",
    "RandomState",
    "RegressionPlots",
    "StopOnNonFiniteLoss",
    "TrainingDiagnostics",
]
