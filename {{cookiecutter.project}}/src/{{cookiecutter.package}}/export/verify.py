"""Parity with the eager model and latency, measured the same way for every format."""

import statistics
import time
from collections.abc import Callable

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
    """How far an artifact's logits are from the eager model's on the same inputs."""
    logits = run(inputs)
    return {
        "max_abs_diff": float(np.abs(logits - expected).max()),
        "argmax_agreement": float((logits.argmax(1) == expected.argmax(1)).mean()),
    }


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
