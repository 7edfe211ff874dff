"""Tasks as plug-ins: what a model predicts, one module per task (classification.py,
regression.py), found by the contract's `target.task`, the module's name. Only these modules
know what a task's targets and outputs mean; datamodules, inference, serving and export ask
them through `get(task)`.

A task module defines, with numpy and pandas and never torch:

- `Target`, a `contract.Target` model: its part of the data contract (class names; or the
  target's name, units, mean and std), made by its `fit(...)` from the training split;
- `encode(values, target) -> np.ndarray`: a target column as the model learns it;
- `outputs(target) -> int`: how many numbers the model gives per sample;
- `decode(outputs, target, top_k) -> list[dict]`: predictions from the model's outputs;
- `Prediction`, a Pydantic model of one of those predictions, for the HTTP API's answers;
- `metric(outputs, targets) -> dict`: the test metric export judges a format by, named as
  training logs it;
- `parity(outputs, expected) -> dict`: what export checks besides the largest difference;
- `COLUMNS` and `rows(prediction) -> list[list[str]]`: predict's printed table;
- `HINT`: how to train a model of another task on such a target, for one-line errors.

A task that lacks one of REQUIRED is refused in one line when a command first asks for it.
"""

import sys
from types import ModuleType

from .. import plugins

REQUIRED = (
    "Target",
    "fit",
    "encode",
    "outputs",
    "decode",
    "Prediction",
    "metric",
    "parity",
    "COLUMNS",
    "rows",
    "HINT",
)


def get(task: str) -> ModuleType:
    return plugins.find(sys.modules[__name__], task, "task")
