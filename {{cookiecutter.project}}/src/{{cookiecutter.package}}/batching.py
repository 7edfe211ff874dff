"""Micro-batching in the event loop: the requests that arrive together run as one model call.

The first request of a batch waits a few turns of the event loop, in which the loop reads and
parses whatever other requests have arrived meanwhile; then the batch runs, inline. While it
runs, new requests wait in their sockets, and the next batch holds them all. No timer polls:
an idle server does nothing, and a request alone waits only those few turns.
"""

import asyncio
import logging
from collections.abc import Callable
from itertools import islice
from typing import Any

import numpy as np

# Turns of the event loop a batch waits for more requests. A request read in one turn is parsed
# in the next; two more let those read while the first was parsed join it.
TURNS = 3
# uvicorn's own logger, whose level serve.yaml's log_level sets: `debug` logs every batch.
log = logging.getLogger("uvicorn.error")


class MicroBatcher:
    """Runs the samples of requests through `predict(inputs, top_k)`, which answers each sample,
    in batches of at most `max_batch_size` requests; a batch waits at most `batch_timeout`
    seconds after its first request."""

    def __init__(
        self,
        predict: Callable[[np.ndarray, int], list[Any]],
        max_batch_size: int,
        batch_timeout: float,
    ):
        self.predict, self.most, self.timeout = predict, max_batch_size, batch_timeout
        self.waiting: list[tuple[np.ndarray, int, asyncio.Future]] = []
        self.deadline = 0.0

    async def answers(self, inputs: np.ndarray, top_k: int) -> list[Any]:
        """What `predict` answers for each of `inputs`, run with the inputs of other requests."""
        loop = asyncio.get_running_loop()
        answer = loop.create_future()
        self.waiting.append((inputs, top_k, answer))
        if len(self.waiting) >= self.most:
            self.flush()
        elif len(self.waiting) == 1:
            self.deadline = loop.time() + self.timeout
            loop.call_soon(self.wait, self.waiting, TURNS - 1)
        return await answer

    def wait(self, batch: list, turns: int) -> None:
        if batch is not self.waiting:  # already run, full
            return
        loop = asyncio.get_running_loop()
        if turns and loop.time() < self.deadline:
            loop.call_soon(self.wait, batch, turns - 1)
        else:
            self.flush()

    def flush(self) -> None:
        """Runs the waiting requests: one call for those that ask for the same top_k."""
        batch, self.waiting = self.waiting, []
        log.debug("batch of %d requests", len(batch))
        for top_k in {top_k for _, top_k, _ in batch}:
            group = [(inputs, answer) for inputs, k, answer in batch if k == top_k]
            try:
                results = iter(self.predict(np.concatenate([g[0] for g in group]), top_k))
            except Exception as error:  # every request of the call fails with it, no other
                for _, answer in group:
                    if not answer.done():
                        answer.set_exception(error)
                continue
            for inputs, answer in group:
                mine = list(islice(results, len(inputs)))
                if not answer.done():  # done: cancelled, its client gone
                    answer.set_result(mine)
