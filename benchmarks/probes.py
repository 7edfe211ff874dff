"""Callbacks that measure inside a real run of `python train.py` in a rendered project, added
with `+callbacks.zz_probe._target_=probes.<Class> +callbacks.zz_probe.path=<file>`
(common.train_with_probe does that); each writes JSON to `path`.

- `EpochTimer`: wall-clock timestamps of the run (epoch starts and ends, first step, time spent
  between batches), kept by a `Clock`, which the hand-written loop in baselines.py uses too. With
  `BENCH_TURNS` set (train_overhead.py), a Clock runs each epoch only in its turn (`Turns`).
- `HookTimer`: the milliseconds per epoch spent in each hook of the other callbacks, of the model
  and of the loggers.
- `ThroughputProbe` (gpu_check.py): training samples/s after the first epoch and peak GPU memory.
"""

import json
import os
import resource
import socket
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities.data import extract_batch_size


class Turns:
    """Several runs at once, one epoch at a time: the runs of a round of train_overhead.py --goal
    start together, and each epoch waits until no other run is in one. Every run then meets the
    same moments of a machine whose speed changes from second to second, where runs one after the
    other met different ones. The coordinator (train_overhead.in_turns) listens at the Unix socket
    `address`; it gives a turn with a byte, and gets it back with a byte or when the run ends."""

    def __init__(self, address: str):
        self.address, self.socket, self.holding = address, None, False

    def take(self) -> None:
        """Waits for this run's turn, unless it holds one. The first waits for every run of the
        round to have started."""
        if self.holding:
            return
        if self.socket is None:
            self.socket = socket.socket(socket.AF_UNIX)
            self.socket.connect(self.address)
        if self.socket.recv(1) != b"g":
            raise RuntimeError("the benchmark that gives the turns has gone")
        self.holding = True

    def give_back(self) -> None:
        self.socket.sendall(b"d")
        self.holding = False


class Clock:
    """Timestamps of a training run; epoch `i` lasts from `epoch_starts[i]` to `epoch_ends[i]`,
    the next epoch's start, validation and every epoch-end hook included, unless the run waited
    for its turn in between."""

    def __init__(self):
        address = os.environ.get("BENCH_TURNS")
        self.turns = Turns(address) if address else None
        self.times = {
            "epoch_starts": [],
            "epoch_ends": [],
            "page_faults": [],  # minor faults so far, at each epoch start
            "train": [],
            "wait": [],
            "samples": [],  # training samples of each epoch, where batch_start is told them
            "first_step": None,
            "end": None,
        }
        self._wait = 0.0
        self._last = None

    def epoch_start(self):
        if self.times["epoch_starts"]:
            self.times["epoch_ends"].append(time.time())
            if self.turns:
                self.turns.give_back()
        if self.turns:
            self.turns.take()
        self.times["epoch_starts"].append(time.time())
        self.times["page_faults"].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)
        self._wait, self._samples, self._start = 0.0, 0, time.perf_counter()
        self._last = self._start

    def batch_start(self, samples: int = 0):
        now = time.perf_counter()
        self._samples += samples
        if self.times["first_step"] is None:
            self.times["first_step"] = time.time()
        if self._last is not None:
            self._wait += now - self._last

    def batch_end(self):
        self._last = time.perf_counter()

    def epoch_end(self):
        """The training batches are done: record how long they took and how much of it was
        spent between batches (fetching the next one, plus the loop's own bookkeeping)."""
        if self._last is not None:
            self.times["train"].append(time.perf_counter() - self._start)
            self.times["wait"].append(self._wait)
            self.times["samples"].append(self._samples)
        self._last = None  # validation and epoch-end hooks are not waiting for data

    def finish(self, path: str):
        self.times["end"] = time.time()
        Path(path).write_text(json.dumps(self.times))


class EpochTimer(pl.Callback):
    def __init__(self, path: str):
        self.path, self.clock = path, Clock()

    def on_fit_start(self, trainer, pl_module):
        if self.clock.turns:
            # The first turn, before the run's own timers start (LastCheckpoint's, the pictures'):
            # a run waits about as many epochs' time as there are runs for each of its epochs, so
            # work done every so many seconds comes that many times as often per epoch (none in
            # the goal's 10 epochs of 3 runs, as in a run alone).
            self.clock.turns.take()
        self.clock.times["fit_start"] = time.time()

    def on_train_start(self, trainer, pl_module):
        self.clock.times["train_start"] = time.time()  # after the sanity-check validation

    def on_train_epoch_start(self, trainer, pl_module):
        self.clock.epoch_start()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.clock.batch_start(extract_batch_size(batch))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.clock.batch_end()

    def on_validation_start(self, trainer, pl_module):
        self.clock.epoch_end()

    def on_train_end(self, trainer, pl_module):
        self.clock.finish(self.path)


def overrides(callback: pl.Callback, hook: str) -> bool:
    return getattr(type(callback), hook, None) is not getattr(pl.Callback, hook, None)


class HookTimer(pl.Callback):
    """Wall time spent in every hook of every other callback, of the LightningModule and of the
    loggers' `log_metrics`/`save`, measured inside a real run (cold caches and all), written as
    milliseconds per training epoch."""

    HOOKS = (
        "on_train_epoch_start",
        "on_train_batch_start",
        "on_before_backward",
        "on_after_backward",
        "on_before_optimizer_step",
        "on_before_zero_grad",
        "on_train_batch_end",
        "on_validation_epoch_start",
        "on_validation_batch_start",
        "on_validation_batch_end",
        "on_validation_epoch_end",
        "on_validation_end",
        "on_train_epoch_end",
        "on_save_checkpoint",
        "state_dict",
        "log_metrics",
        "save",
    )

    def __init__(self, path: str):
        self.path, self.seconds, self.epochs = path, {}, 0

    def on_train_start(self, trainer, pl_module):
        # After the sanity check: only the training epochs count.
        owners = [c for c in trainer.callbacks if c is not self] + [pl_module, *trainer.loggers]
        for owner in owners:
            for hook in self.HOOKS:
                # A callback's empty hooks, inherited from Callback, are not called (upstream.py).
                empty = isinstance(owner, pl.Callback) and not overrides(owner, hook)
                if callable(getattr(owner, hook, None)) and not empty:
                    self._wrap(owner, hook)

    def _wrap(self, owner, hook: str) -> None:
        # Two ModelCheckpoints (best, last) differ by what they monitor.
        monitor = f"[{owner.monitor}]" if hasattr(owner, "monitor") else ""
        original, name = getattr(owner, hook), f"{type(owner).__name__}{monitor}.{hook}"

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

        # Past nn.Module's __setattr__: a plain attribute that shadows the method.
        object.__setattr__(owner, hook, timed)

    def on_train_epoch_end(self, trainer, pl_module):
        self.epochs += 1

    def on_train_end(self, trainer, pl_module):
        per_epoch = {name: 1000 * s / self.epochs for name, s in self.seconds.items()}
        Path(self.path).write_text(json.dumps(per_epoch))


class ThroughputProbe(pl.Callback):
    """Writes samples/s after the first (warm-up) epoch and peak GPU memory to `path` as JSON."""

    def __init__(self, path: str):
        self.path, self.samples, self.start = Path(path), 0, None

    def on_train_epoch_start(self, trainer, pl_module):
        if trainer.current_epoch == 1:
            self._sync()
            self.start, self.samples = time.perf_counter(), 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.samples += len(batch[1])

    def on_train_end(self, trainer, pl_module):
        self._sync()
        seconds = time.perf_counter() - self.start
        memory = torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None
        result = {"samples_per_s": self.samples / seconds, "peak_memory_mib": memory}
        self.path.write_text(json.dumps(result))

    @staticmethod
    def _sync():
        if torch.cuda.is_available():  # GPU work is asynchronous: wait for it before timing
            torch.cuda.synchronize()
