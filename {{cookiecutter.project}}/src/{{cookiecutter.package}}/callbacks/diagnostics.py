"""Is training healthy, and is the GPU fed? Gradient norm, throughput, data stalls, memory."""

import time

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities.data import extract_batch_size

from ..records import is_logging_step


class TrainingDiagnostics(pl.Callback):
    """Logs every `trainer.log_every_n_steps` optimizer steps, averaged over those steps:

    - `train/grad_norm`: total L2 norm of all gradients, after AMP unscaling, before clipping;
    - `perf/samples_per_sec`: training throughput summed over all processes;
    - `perf/data_wait_frac`: share of the time spent between steps, waiting for the next batch
      (loading it, copying it to the device, and Lightning's own per-step bookkeeping). Near 1
      the data pipeline limits speed, near 0 the model does;
    - `perf/gpu_mem_gb`, `perf/gpu_mem_peak_gb`: allocated device memory now and its peak, on CUDA.

    Timings are taken on the host and the gradient norm stays on the device until it is logged,
    so only logging steps wait for the GPU.
    """

    def __init__(self):
        self._start_window(None)

    def _start_window(self, now: float | None) -> None:
        self._window_start = self._batch_end = now
        self._wait = 0.0
        self._samples = 0
        self._grad_norm = None

    def on_train_epoch_start(self, trainer, pl_module):
        self._start_window(None)

    def on_validation_end(self, trainer, pl_module):
        # Validation inside a training epoch is neither a training step nor a wait for data.
        self._start_window(None)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        now = time.perf_counter()
        if self._window_start is None:
            self._window_start = now
        elif self._batch_end is not None:
            self._wait += now - self._batch_end
        self._samples += extract_batch_size(batch)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        if is_logging_step(trainer, trainer.global_step + 1):
            grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
            # One fused call rather than a norm per parameter.
            self._grad_norm = torch.nn.utils.get_total_norm(grads) if grads else None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self._grad_norm is None:  # not a logging step
            self._batch_end = time.perf_counter()
            return
        cuda = pl_module.device.type == "cuda"
        if cuda:
            torch.cuda.synchronize(pl_module.device)  # count the work queued on the GPU
        now = time.perf_counter()
        elapsed = now - self._window_start
        metrics = {
            "train/grad_norm": self._grad_norm.item(),
            "perf/samples_per_sec": self._samples * trainer.world_size / elapsed,
            "perf/data_wait_frac": self._wait / elapsed,
        }
        if cuda:
            metrics["perf/gpu_mem_gb"] = torch.cuda.memory_allocated(pl_module.device) / 2**30
            metrics["perf/gpu_mem_peak_gb"] = (
                torch.cuda.max_memory_allocated(pl_module.device) / 2**30
            )
            torch.cuda.reset_peak_memory_stats(pl_module.device)
        # The step Lightning logs `train/loss` of this batch at, so the curves line up.
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step - 1)
        self._start_window(now)
