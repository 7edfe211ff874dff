"""Random number generator state in every checkpoint, so that resuming changes nothing."""

import random

import numpy as np
import pytorch_lightning as pl
import torch


class RandomState(pl.Callback):
    """Saves the Python, NumPy and torch generators with each checkpoint and restores them when
    training resumes: shuffling and dropout continue as if the run had never stopped.

    The state is plain ints and tensors, so checkpoints still load with `weights_only=True`.
    """

    def __init__(self):
        self._restored: dict | None = None

    def state_dict(self) -> dict:
        name, keys, position, has_gauss, gauss = np.random.get_state()
        return {
            "python": random.getstate(),
            "numpy": (name, keys.tolist(), position, has_gauss, gauss),
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        }

    def load_state_dict(self, state_dict: dict) -> None:
        self._restored = state_dict

    def on_train_start(self, trainer, pl_module) -> None:
        # Restored here rather than on load: the sanity-check validation in between draws numbers.
        if self._restored is None:
            return
        state, self._restored = self._restored, None
        random.setstate(state["python"])
        np.random.set_state(state["numpy"])
        torch.set_rng_state(state["torch"])
        if state["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])
