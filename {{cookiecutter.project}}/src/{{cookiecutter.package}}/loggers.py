"""Experiment loggers that stop with one line where Lightning's own would end in a traceback."""

from pytorch_lightning.loggers import WandbLogger as LightningWandbLogger

from .console import UserError
from .upstream import leave_out_wandb_anonymous


class WandbLogger(LightningWandbLogger):
    """Lightning's W&B logger (configs/logger/wandb.yaml). A run that W&B refuses to start, such
    as one without a login, stops with one line that says how to log in or log offline."""

    def __init__(self, **options):
        super().__init__(**options)
        leave_out_wandb_anonymous(self)

    @property
    def experiment(self):
        from wandb.errors import UsageError  # an extra: present once this logger is in use

        try:
            return super().experiment
        except UsageError as error:
            raise UserError(
                f"logger=wandb cannot start a run: {error} Or set WANDB_MODE=offline to keep the "
                "run local (`wandb sync` uploads it later)"
            ) from None
