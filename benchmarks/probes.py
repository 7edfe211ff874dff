"""Callbacks that measure inside a real run of `python train.py` in a rendered project, added
with `+callbacks.zz_probe._target_=probes.<Class> +callbacks.zz_probe.path=<file>`
(common.train_with_probe does that); each writes JSON to `path`.

- `EpochTimer`: wall-clock timestamps of the run (epoch starts, first step, time spent between
  batches), kept by a `Clock`, which the hand-written loop in baselines.py uses too.
- `HookTimer`: the milliseconds per epoch spent in each hook of the other callbacks, of the model
  and of the loggers.
- `ThroughputProbe` (gpu_check.py): training samples/s after the first epoch and peak GPU memory.
"""

import json
import resource
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities.data import extract_batch_size


class Clock:
    """Timestamps of a training run; epoch `i` lasts from `epoch_starts[i]` to the next start
    (or `end`), validation and every epoch-end hook included."""

    def __init__(self):
        self.times = {
            "epoch_starts": [],
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
