"""Micro-batching in the event loop: the requests that arrive together run as one model call.

The first request of a batch waits a few turns of the event loop, in which the loop reads and
parses whatever other requests have arrived meanwhile; then the batch runs, inline. While it
runs, new requests wait in their sockets, and the next batch holds them all. No timer polls:
an idle server does nothing, and a request alone waits only those few turns. What is done once
per batch rather than once per request: preparing the raw values of every request (checking
their range, normalizing), the model call, and reading its outputs.
"""

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from typing import Any

import numpy as np

# Turns of the event loop a batch waits for more requests. A request read in one turn is parsed
# in the next; two more let those read while the first was parsed join it.
TURNS = 3
# uvicorn's own logger, whose level serve.yaml's log_level sets: `debug` logs every batch.
log = logging.getLogger("uvicorn.error")


@dataclass(slots=True)
class Request:
    samples: np.ndarray
    top_k: int
    raw: bool  # values that `prepare` makes model inputs of, or model inputs already
    answer: asyncio.Future


class MicroBatcher:
    """Answers the samples of requests in batches of at most `max_batch_size` requests; a batch
    waits at most `batch_timeout` seconds after its first request. For each batch,
    `prepare(raw)` makes model inputs of the raw samples of all its requests at once,
    `run(inputs)` runs the model and `decode(outputs, top_k)` answers each sample."""

    def __init__(
        self,
        prepare: Callable[[np.ndarray], np.ndarray],
        run: Callable[[np.ndarray], np.ndarray],
        decode: Callable[[np.ndarray, int], list[Any]],
        max_batch_size: int,
        batch_timeout: float,
    ):
        self.prepare, self.run, self.decode = prepare, run, decode
        self.most, self.timeout = max_batch_size, batch_timeout
        self.waiting: list[Request] = []
        self.deadline = 0.0

    async def answers(self, samples: np.ndarray, top_k: int, raw: bool = True) -> list[Any]:
        """The answer to each of `samples` (raw values, or model inputs with `raw=False`), run
        with the samples of other requests."""
        loop = asyncio.get_running_loop()
        request = Request(samples, top_k, raw, loop.create_future())
        self.waiting.append(request)
        if len(self.waiting) >= self.most:
            self.flush()
        elif len(self.waiting) == 1:
            self.deadline = loop.time() + self.timeout
            loop.call_soon(self.wait, self.waiting, TURNS - 1)
        return await request.answer

    def wait(self, batch: list[Request], turns: int) -> None:
        if batch is not self.waiting:  # already run, full
            return
        loop = asyncio.get_running_loop()
        if turns and loop.time() < self.deadline:
            loop.call_soon(self.wait, batch, turns - 1)
        else:
            self.flush()

    def flush(self) -> None:
        """Runs the waiting requests."""
        batch, self.waiting = self.prepared(self.waiting), []
        if not batch:  # each one refused
            return
        log.debug("batch of %d requests", len(batch))
        try:
            outputs = self.run(np.concatenate([request.samples for request in batch]))
            self.answer(batch, outputs)
        except Exception as error:  # every request of the batch fails with it, no other
            fail(batch, error)

    def prepared(self, batch: list[Request]) -> list[Request]:
        """The requests of `batch` with model inputs as their samples. Raw samples are prepared
        together; if that fails, each request's alone, and those that fail get the error."""
        raw = [request for request in batch if request.raw]
        if not raw:
            return batch
        try:
            inputs = self.prepare(np.concatenate([request.samples for request in raw]))
        except Exception:  # one of them is refused: which, each alone shows
            for request in raw:
                try:
                    request.samples = self.prepare(request.samples)
                except Exception as error:
                    fail([request], error)
            return [request for request in batch if not request.answer.done()]
        for request, part in zip(raw, split(inputs, raw), strict=True):
            request.samples = part
        return batch

    def answer(self, batch: list[Request], outputs: np.ndarray) -> None:
        """Decodes the outputs of a batch: once for the requests that ask for the same top_k."""
        each = list(zip(batch, split(outputs, batch), strict=True))
        for top_k in {request.top_k for request in batch}:
            mine = [(request, rows) for request, rows in each if request.top_k == top_k]
            answers = iter(self.decode(np.concatenate([rows for _, rows in mine]), top_k))
            for request, rows in mine:
                answered = list(islice(answers, len(rows)))
                if not request.answer.done():  # done: cancelled, its client gone
                    request.answer.set_result(answered)


def split(array: np.ndarray, requests: list[Request]) -> list[np.ndarray]:
    """`array`, one row per sample of `requests` in turn, as each request's rows."""
    parts, start = [], 0
    for request in requests:
        parts.append(array[start : start + len(request.samples)])
        start += len(request.samples)
    return parts


def fail(requests: list[Request], error: Exception) -> None:
    for request in requests:
        if not request.answer.done():
            request.answer.set_exception(error)
