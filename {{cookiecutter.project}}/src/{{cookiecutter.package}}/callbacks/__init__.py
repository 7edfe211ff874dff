from .confusion_matrix import ConfusionMatrixImage
from .curves import PlotCurves
from .diagnostics import TrainingDiagnostics
from .finite_loss import StopOnNonFiniteLoss
from .last_checkpoint import LastCheckpoint
from .progress import ProgressBar
from .random_state import RandomState
from .regression_plots import RegressionPlots
from .watched_metric import RequireWatchedMetrics

__all__ = [
    "ConfusionMatrixImage",
    "LastCheckpoint",
    "PlotCurves",
    "ProgressBar",
    "RandomState",
    "RegressionPlots",
    "RequireWatchedMetrics",
    "StopOnNonFiniteLoss",
    "TrainingDiagnostics",
]
