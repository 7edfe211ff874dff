import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from .base import NetModule


class Classifier(NetModule):
    """Trains any network that maps a batch of inputs to class logits (see NetModule)."""

    task = "classification"
    tracked = {"val/acc": "max"}

    def __init__(
        self,
        net: dict,
        optimizer: dict,
        scheduler: dict | None = None,
        num_classes: int = 10,
        compile: bool = False,
        monitor: str = "val/loss",
        mode: str = "min",
    ):
        super().__init__(net, optimizer, scheduler, compile, monitor, mode)
        # validate_args=False: checking the labels' values would make every step wait for the GPU.
        self.val_acc = MulticlassAccuracy(num_classes, average="micro", validate_args=False)
        self.test_acc = MulticlassAccuracy(num_classes, average="micro", validate_args=False)
        self.val_loss = MeanMetric()
        self.test_loss = MeanMetric()

    def step(self, batch, stage: str) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = batch
        logits = self.outputs(x, self.hparams.num_classes, "one logit per class")
        loss = F.cross_entropy(logits, y)
        # Metrics accumulate on the device every step and are logged once per epoch (below):
        # each self.log call is Python work inside every step.
        if stage == "train":
            # Plain tensor sums: cheaper per step than a torchmetrics update.
            self.train_correct += (logits.detach().argmax(dim=-1) == y).sum()
            self.train_seen += len(y)
        else:
            getattr(self, f"{stage}_acc").update(logits, y)
            getattr(self, f"{stage}_loss").update(loss, weight=len(y))
        return loss, logits

    def on_train_epoch_start(self):
        self.train_correct = torch.zeros((), dtype=torch.long, device=self.device)
        self.train_seen = 0

    # A run resumed from a checkpoint saved inside an epoch goes on counting that epoch where
    # it was: Lightning then skips on_train_epoch_start.
    def on_save_checkpoint(self, checkpoint):
        counts = [int(getattr(self, "train_correct", 0)), getattr(self, "train_seen", 0)]
        checkpoint["train_counts"] = counts

    def on_load_checkpoint(self, checkpoint):
        self.train_correct, self.train_seen = checkpoint.get("train_counts", [0, 0])

    def on_train_epoch_end(self):
        # DistributedSampler gives every rank as many samples: the mean over ranks is exact.
        accuracy = self.train_correct / max(self.train_seen, 1)
        self.log("train/acc", accuracy, prog_bar=True, sync_dist=True)

    def on_validation_epoch_end(self):
        self.log_validation({"val/loss": self.val_loss, "val/acc": self.val_acc})

    def on_test_epoch_end(self):
        self.log_dict({"test/loss": self.test_loss, "test/acc": self.test_acc})

    def predict_step(self, batch, batch_idx):
        x = batch[0] if isinstance(batch, list | tuple) else batch
        return self(x).softmax(dim=-1)
