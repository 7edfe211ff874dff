"""Ends the W&B run with its Hydra job; configured by configs/logger/wandb.yaml."""

import sys

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback


class FinishWandbRun(Callback):
    """Lightning's WandbLogger reuses a W&B run still open in the process, so without this every
    job of a multirun would log into the first job's run."""

    def on_job_end(self, config, job_return: JobReturn, **kwargs) -> None:
        wandb = sys.modules.get("wandb")
        if wandb is not None and wandb.run is not None:
            wandb.finish(exit_code=0 if job_return.status == JobStatus.COMPLETED else 1)
