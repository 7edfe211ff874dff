import torch
import torch.nn.functional as F
from torchmetrics import MeanAbsoluteError, MeanMetric, MeanSquaredError, R2Score

from .base import NetModule

METRICS = ("loss", "mae", "rmse", "r2")


class Regressor(NetModule):
    """Trains any network with one output to predict a number (see NetModule).

    The network learns the target standardized with the training split's mean and std; metrics,
    pictures and predictions are in the target's own units. The mean and std come from the data
    contract when fitting starts and are saved with the weights.
    """

    task = "regression"
    tracked = {"val/r2": "max"}

    def __init__(
        self,
        net: dict,
        optimizer: dict,
        scheduler: dict | None = None,
        compile: bool = False,
        monitor: str = "val/r2",
        mode: str = "max",
    ):
        super().__init__(net, optimizer, scheduler, compile, monitor, mode)
        self.register_buffer("target_mean", torch.zeros(()))
        self.register_buffer("target_std", torch.ones(()))
        for stage in ("val", "test"):  # in the target's units, but the loss
            setattr(self, f"{stage}_loss", MeanMetric())
            setattr(self, f"{stage}_mae", MeanAbsoluteError())
            setattr(self, f"{stage}_rmse", MeanSquaredError(squared=False))
            setattr(self, f"{stage}_r2", R2Score())

    def setup(self, stage: str):
        super().setup(stage)
        if stage == "fit":  # eval and export load them with the weights
            target = self.trainer.datamodule.contract.target
            self.target_mean.fill_(target.mean)
            self.target_std.fill_(target.std)

    def to_units(self, standardized: torch.Tensor) -> torch.Tensor:
        return standardized * self.target_std + self.target_mean

    def step(self, batch, stage: str) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = batch
        prediction = self.outputs(x, 1, "one number a sample").squeeze(-1)
        loss = F.mse_loss(prediction, y)
        predicted, true = self.to_units(prediction.detach()), self.to_units(y)
        if stage != "train":
            getattr(self, f"{stage}_loss").update(loss, weight=len(y))
            for name in METRICS[1:]:
                getattr(self, f"{stage}_{name}").update(predicted, true)
        return loss, predicted

    def stage_metrics(self, stage: str) -> dict:
        return {f"{stage}/{name}": getattr(self, f"{stage}_{name}") for name in METRICS}

    def on_validation_epoch_end(self):
        self.log_validation(self.stage_metrics("val"))

    def on_test_epoch_end(self):
        self.log_dict(self.stage_metrics("test"))

    def predict_step(self, batch, batch_idx):
        x = batch[0] if isinstance(batch, list | tuple) else batch
        return self.to_units(self(x).squeeze(-1))
