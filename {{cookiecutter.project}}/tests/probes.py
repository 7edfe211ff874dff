"""Test-only callbacks, used in process or passed to the real CLI as
`+callbacks.<name>._target_=probes.<Class>` with this folder on PYTHONPATH, and networks
defined outside the project."""

import atexit
import hashlib
import json
import time
from pathlib import Path

import pytorch_lightning as pl
import torch

from {{ cookiecutter.package }} import models


class RankRecorder(pl.Callback):
    """Writes what this rank saw to `<dirpath>/rank<N>.json`: the train-split indices of every
    batch per epoch, the synchronized val/test metrics, and every checkpoint it wrote; and, as
    the process exits, whether its process group was still alive, to `rank<N>.exit.json`."""

    def __init__(self, dirpath: str):
        self.dirpath = Path(dirpath)
        self.seen = {"train": {}, "val": {}, "test": {}, "saved": []}

    def setup(self, trainer, pl_module, stage):
        self.path = self.dirpath / f"rank{trainer.global_rank}.json"
        io, save = trainer.strategy.checkpoint_io, trainer.strategy.checkpoint_io.save_checkpoint

        def counted_save(checkpoint, path, storage_options=None):
            self.seen["saved"].append([checkpoint["epoch"], Path(path).name])
            save(checkpoint, path, storage_options)

        io.save_checkpoint = counted_save
        exit_path = self.dirpath / f"rank{trainer.global_rank}.exit.json"
        atexit.register(
            lambda: exit_path.write_text(json.dumps(torch.distributed.is_initialized()))
        )

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        # Every digits image is unique, so an image identifies its index in the train split.
        inputs = trainer.datamodule.splits["train"].inputs.flatten(1)
        matches = (batch[0].flatten(1)[:, None] == inputs[None]).all(-1).nonzero()[:, 1]
        self.seen["train"].setdefault(trainer.current_epoch, []).extend(matches.tolist())

    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking:
            self.seen["val"] = self._metrics(trainer, "val/")

    def on_test_end(self, trainer, pl_module):
        self.seen["test"] = self._metrics(trainer, "test/")

    def teardown(self, trainer, pl_module, stage):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.seen))

    @staticmethod
    def _metrics(trainer, prefix):
        return {k: v.item() for k, v in trainer.callback_metrics.items() if k.startswith(prefix)}


class SavedEpochs(pl.Callback):
    """The epoch of every checkpoint saved, in turn."""

    def __init__(self):
        self.epochs = []

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        self.epochs.append(checkpoint["epoch"])


class PoisonWeights(pl.Callback):
    """Turns the weights to NaN before training step `step`: a stand-in for a diverging run.
    With `rank`, only on that DDP rank: the others catch it through the gradient all-reduce."""

    def __init__(self, step: int, rank: int | None = None):
        self.step, self.rank = step, rank

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step and self.rank in (None, trainer.global_rank):
            with torch.no_grad():
                next(pl_module.parameters()).fill_(float("nan"))


# The shipped networks under their own names, in a module outside the project: a user's own.
class SmallCNN(models.SmallCNN):
    pass


class MLP(models.MLP):
    pass


class Transformer(models.Transformer):
    pass


class TokenBag(models.TokenBag):
    pass


class ModeProbe(pl.Callback):
    """Records train/eval mode of every module where Lightning should have switched it."""

    def __init__(self):
        self.during_validation, self.during_training = set(), set()

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self.during_validation |= {module.training for module in pl_module.modules()}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.during_training |= {module.training for module in pl_module.modules()}


class BatchDigests(pl.Callback):
    """Appends, for every training batch, a line to `<dirpath>/rank<N>.jsonl`: the epoch, the
    global step and a digest of each sample's input, written as it goes, so that a killed run
    leaves what it saw. `pause`: seconds to wait per batch, for a test to stop a run mid-epoch."""

    def __init__(self, dirpath: str, pause: float = 0.0):
        self.dirpath, self.pause = Path(dirpath), pause

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        digests = [digest(row) for row in batch[0]]
        line = {"epoch": trainer.current_epoch, "step": trainer.global_step, "samples": digests}
        self.dirpath.mkdir(parents=True, exist_ok=True)
        with open(self.dirpath / f"rank{trainer.global_rank}.jsonl", "a") as file:
            file.write(json.dumps(line) + "\n")
        time.sleep(self.pause)


def digest(sample: torch.Tensor) -> str:
    """A sample's input, known by its values."""
    return hashlib.sha1(sample.numpy().tobytes()).hexdigest()[:16]
