"""Parity with the eager model, the task metric on the test split, and latency, measured the
same way for every format."""

import statistics
import time
from collections.abc import Callable, Iterable

import numpy as np
import torch

# Every format is run through the same signature: a float32 batch in, logits out.
Runner = Callable[[np.ndarray], np.ndarray]


def torch_runner(module: Callable) -> Runner:
    def run(inputs: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return module(torch.from_numpy(inputs)).numpy()

    return run


def parity(run: Runner, expected: np.ndarray, inputs: np.ndarray) -> dict:
    """How far an artifact's outputs are from the eager model's on the same inputs, and, for
    class logits, how often both pick the same class."""
    outputs = run(inputs)
    checks = {"max_abs_diff": float(np.abs(outputs - expected).max())}
    if outputs.shape[1] > 1:  # not a regression's single value
        checks["argmax_agreement"] = float((outputs.argmax(1) == expected.argmax(1)).mean())
    return checks


def task_metric(outputs: np.ndarray, targets: np.ndarray, task: str) -> dict[str, float]:
    """The test metric, named as training logs it: accuracy of class logits (`test/acc`), or
    R² of a standardized value (`test/r2`; standardizing both sides leaves R² unchanged)."""
    if task == "classification":
        return {"test/acc": float((outputs.argmax(1) == targets).mean())}
    predicted, targets = outputs[:, 0].astype(np.float64), targets.astype(np.float64)
    residual = ((targets - predicted) ** 2).sum()
    return {"test/r2": float(1 - residual / ((targets - targets.mean()) ** 2).sum())}


def split_metric(run: Runner, batches: Iterable[tuple[np.ndarray, np.ndarray]], task: str) -> dict:
    """`task_metric` of what `run` outputs for every (inputs, targets) batch of the test split."""
    outputs, targets = zip(*((run(inputs), target) for inputs, target in batches), strict=True)
    return task_metric(np.concatenate(outputs), np.concatenate(targets), task)


def latency_ms(run: Runner, inputs: np.ndarray, warmup: int, repeats: int) -> float:
    """Median wall time of one call, after warm-up runs that fill caches and plan kernels."""
    for _ in range(warmup):
        run(inputs)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(inputs)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def measure(
    run: Runner,
    reference: Runner,
    samples: np.ndarray,
    batch_sizes: list[int],
    warmup: int,
    repeats: int,
) -> dict:
    """Parity and latency at each of `batch_sizes`, keyed by batch size."""
    results = {"parity": {}, "latency_ms": {}}
    for size in batch_sizes:
        inputs = samples[:size]
        results["parity"][str(size)] = parity(run, reference(inputs), inputs)
        timing = latency_ms(run, inputs, warmup, repeats)
        results["latency_ms"][str(size)] = timing
    return results
