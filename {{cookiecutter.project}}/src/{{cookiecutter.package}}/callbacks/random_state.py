"""Random number generator state in every checkpoint, so that resuming changes nothing."""

import random

import numpy as np
import pytorch_lightning as pl
import torch


class RandomState(pl.Callback):
    """Saves the Python, NumPy and torch generators with each checkpoint and restores them when
    training resumes: shuffling and dropout continue as if the run had never stopped.

    The state is plain values and tensors, so checkpoints still load with `weights_only=True`.
    The 624 numbers of the Python and NumPy generators are kept as one tensor each: pickled one by
    one they would make every checkpoint save slower.
    """

    def __init__(self):
        self._restored: dict | None = None

    def state_dict(self) -> dict:
        version, words, gauss_next = random.getstate()
        name, keys, position, has_gauss, gauss = np.random.get_state()
        return {
            "python": (version, torch.tensor(words), gauss_next),
            "numpy": (name, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, gauss),
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
        version, words, gauss_next = state["python"]
        random.setstate((version, tuple(words.tolist()), gauss_next))
        name, keys, *rest = state["numpy"]
        np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))
        torch.set_rng_state(state["torch"])
        if state["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])
