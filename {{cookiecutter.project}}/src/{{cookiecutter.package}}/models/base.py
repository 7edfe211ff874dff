import pytorch_lightning as pl
import torch
from hydra.utils import instantiate
from pytorch_lightning.accelerators import CPUAccelerator
from torch import nn
from torchmetrics import MaxMetric, Metric, MinMetric

from ..builders import build_partial
from ..console import UserError
from ..records import is_logging_step
from ..upstream import missing_cpp_compiler


class NetModule(pl.LightningModule):
    """What the project's LightningModules share: a network built from its config, the optimizer
    and scheduler, and the metric that every part of a run watches. Subclasses add the loss and
    the metrics of their task in `step`.

    `net`, `optimizer` and `scheduler` are Hydra configs (plain dicts), not objects: they are
    saved as hyperparameters, so checkpoints load with `weights_only=True`.

    `monitor` and `mode` name the metric that checkpointing, early stopping, the learning-rate
    scheduler and sweeps watch, and whether higher (`max`) or lower (`min`) is better. The model's
    config declares them once; configs/callbacks/ and configs/hparams_search/ read them there.

    `compile=True` compiles the network with `torch.compile` when fitting starts. The network is
    compiled in place, so parameter names, checkpoints and exports are the same as without it.
    """

    # Validation metrics whose best value so far is logged as `<name>_best`, and which way is
    # better; the monitored metric is always one of them (sweeps optimize `<monitor>_best`).
    tracked: dict[str, str] = {}

    def __init__(
        self,
        net: dict,
        optimizer: dict,
        scheduler: dict | None = None,
        compile: bool = False,
        monitor: str = "val/loss",
        mode: str = "min",
    ):
        super().__init__()
        self.save_hyperparameters(logger=False)  # with the subclass's own arguments
        self.net = instantiate(net)
        self.best_of = {**self.tracked, monitor: mode}
        # Saved in checkpoints, so that a resumed run remembers the best epoch before it.
        self.bests = nn.ModuleList(
            MaxMetric() if way == "max" else MinMetric() for way in self.best_of.values()
        )
        for best in self.bests:
            best.persistent(True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def step(self, batch, stage: str) -> tuple[torch.Tensor, torch.Tensor]:
        """The loss and the network's outputs for a batch; updates the metrics of `stage`."""
        raise NotImplementedError

    def outputs(self, x: torch.Tensor, size: int, what: str) -> torch.Tensor:
        """The network's outputs for a batch, `size` a sample (one number may come unwrapped);
        one line for a network whose last layer gives another number. The shape is known
        without waiting for the device."""
        outputs = self(x)
        per_sample = tuple(outputs.shape[1:])
        if per_sample != (size,) and not (size == 1 and per_sample == ()):
            raise UserError(
                f"{type(self.net).__name__} gives outputs of shape {tuple(outputs.shape)} for a "
                f"batch of {len(x)}, and the {type(self).__name__} takes ({len(x)}, {size}): "
                f"{what}"
            )
        return outputs

    def log_validation(self, metrics: dict[str, Metric | torch.Tensor]) -> None:
        """Logs the epoch's validation metrics (epoch means over every sample of every DDP rank)
        and, after the sanity check, `<name>_best` of each tracked one."""
        self.log_dict(metrics, prog_bar=True)
        if self.trainer.sanity_checking:  # a few batches on untrained or just restored weights
            return
        for name, best in zip(self.best_of, self.bests, strict=True):
            if name not in metrics:
                raise UserError(
                    f"model.monitor={name} is not a metric the model logs; "
                    f"choose one of {', '.join(metrics)}"
                )
            value = metrics[name]
            best.update(value.compute() if isinstance(value, Metric) else value)
            # The same value on every rank (the metric is synchronized): the mean keeps it.
            self.log(f"{name}_best", best.compute(), prog_bar=True, sync_dist=True)

    def setup(self, stage: str):
        # Only for fitting: eval and export rebuild the model from its checkpoint, eager.
        if stage == "fit" and self.hparams.compile:
            # Else the first step ends in inductor's traceback, after the data is set up.
            on_cpu = isinstance(self.trainer.accelerator, CPUAccelerator)
            if on_cpu and (problem := missing_cpp_compiler()):
                raise UserError(
                    f"model.compile=true on the CPU needs a C++ compiler ({problem}): install "
                    "g++ or point CXX at one, or train with model.compile=false"
                )
            self.net.compile()

    def configure_callbacks(self) -> list[pl.Callback]:
        # What the network's training needs, e.g. a pretrained backbone frozen for a few epochs.
        callbacks = getattr(self.net, "callbacks", None)
        return callbacks() if callable(callbacks) else []

    def training_step(self, batch, batch_idx):
        loss, _ = self.step(batch, "train")
        # Per step and local to each DDP rank: averaging it would cost a collective every step.
        if is_logging_step(self.trainer, self.global_step + 1):
            self.log("train/loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        # The outputs reach callbacks as `outputs`, e.g. for the confusion matrix.
        return self.step(batch, "val")[1]

    def test_step(self, batch, batch_idx):
        self.step(batch, "test")

    def configure_optimizers(self):
        # A network may group its parameters, e.g. a pretrained backbone at a fraction
        # (`lr_scale`) of the head's learning rate; the scheduler then scales every group alike.
        groups = getattr(self.net, "param_groups", None)
        params = groups() if callable(groups) else self.parameters()
        optimizer = build_partial(self.hparams.optimizer, "model.optimizer", params=params)
        for group in optimizer.param_groups:
            group["lr"] *= group.pop("lr_scale", 1.0)
        if not self.hparams.scheduler:
            return optimizer
        scheduler = build_partial(self.hparams.scheduler, "model.scheduler", optimizer=optimizer)
        # `monitor` is read only by schedulers that need a metric, such as ReduceLROnPlateau.
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "monitor": self.hparams.monitor},
        }
