"""Parity with the eager model, the task metric on the test split, and latency, measured the
same way for every format."""

import statistics
import time
from collections.abc import Callable, Iterable
from types import ModuleType

import numpy as np
import torch

# Every format is run through the same signature: a float32 batch in, logits out.
Runner = Callable[[np.ndarray], np.ndarray]


def torch_runner(module: Callable) -> Runner:
    def run(inputs: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return module(torch.from_numpy(inputs)).numpy()

    return run


def parity(run: Runner, expected: np.ndarray, inputs: np.ndarray, task: ModuleType) -> dict:
    """How far an artifact's outputs are from the eager model's on the same inputs, and what
    else the task checks (for classes: how often both pick the same one)."""
    outputs = run(inputs)
    checks = {"max_abs_diff": float(np.abs(outputs - expected).max())}
    return checks | task.parity(outputs, expected)


def split_metric(
    run: Runner, batches: Iterable[tuple[np.ndarray, np.ndarray]], task: ModuleType
) -> dict:
    """The task's test metric of what `run` outputs for every (inputs, targets) batch of the
    test split, named as training logs it (`test/acc`, `test/r2`)."""
    outputs, targets = zip(*((run(inputs), target) for inputs, target in batches), strict=True)
    return task.metric(np.concatenate(outputs), np.concatenate(targets))


def latency(run: Runner, inputs: np.ndarray, warmup: int, repeats: int) -> tuple[float, float]:
    """Median wall time of one call in milliseconds, after warm-up runs that fill caches and plan
    kernels, and the spread of the timings: their interquartile range over their median."""
    for _ in range(warmup):
        run(inputs)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(inputs)
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    if len(times) < 2:
        return 1000 * median, 0.0
    first, _, third = statistics.quantiles(times, n=4, method="inclusive")
    return 1000 * median, (third - first) / median


def measure(
    run: Runner,
    reference: Runner,
    samples: np.ndarray,
    task: ModuleType,
    batch_sizes: list[int],
    warmup: int,
    repeats: int,
) -> dict:
    """Parity, latency and the spread of its timings at each of `batch_sizes`, keyed by batch
    size."""
    results: dict[str, dict] = {"parity": {}, "latency_ms": {}, "latency_spread": {}}
    for size in batch_sizes:
        inputs = samples[:size]
        results["parity"][str(size)] = parity(run, reference(inputs), inputs, task)
        ms, spread = latency(run, inputs, warmup, repeats)
        results["latency_ms"][str(size)] = ms
        results["latency_spread"][str(size)] = spread
    return results
