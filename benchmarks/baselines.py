"""What the project is measured against: the same training and data loading done without it.
Each runs in a process of its own inside a rendered project (its `src` on PYTHONPATH), started
by common.run_baseline.

- `python baselines.py handwritten|plain_lightning|lightning_loop|lightning_manual <epochs> <file>
  <dir>`: the same training done by a hand-written PyTorch loop, by a plain Lightning setup, or
  by Lightning's loop alone on the project's model (automatic or manual optimization), with the
  timestamps that probes.EpochTimer writes in a run of `python train.py`. The hand-written loop
  takes the data as overrides after `<dir>` too (`data=text data.path=...`).
- `python baselines.py loaders <file>`: batches per second of several ways to load the same
  tensors.
- `python baselines.py image_loaders <file> <image folder> <seconds>`: images per second of the
  file-backed image loader against the same images decoded once and held in memory.
"""

import importlib
import json
import sys
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from common import PACKAGE
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from probes import Clock, EpochTimer
from torch.utils.data import DataLoader, TensorDataset


def project_config(epochs: int, overrides=()):
    """The project's own default config: the same network, optimizer, scheduler and batch size."""
    with initialize_config_dir(str(Path.cwd() / "configs"), version_base="1.3"):
        cfg = compose("train", overrides=[f"trainer.max_epochs={epochs}", *overrides])
    # model.net: the network that model.nets declares for the data's kind, as train.py chooses it.
    importlib.import_module(f"{PACKAGE}.builders").choose_network(cfg)
    return cfg


def prepared_data(cfg):
    """The datamodule, set up as train.py sets it up: the shapes it finds go into `cfg.data`,
    where the network's config reads them."""
    return importlib.import_module(f"{PACKAGE}.builders").build_datamodule(cfg)


def handwritten(epochs: int, path: str, overrides=()):
    """The fastest plain loop: tensors sliced by a shuffled index, one validation pass per epoch,
    metrics accumulated on the device and read once per epoch."""
    cfg = project_config(epochs, overrides)
    pl.seed_everything(cfg.seed)
    datamodule = prepared_data(cfg)
    train, val = datamodule.splits["train"], datamodule.splits["val"]
    net = instantiate(cfg.model.net)
    optimizer = instantiate(cfg.model.optimizer)(params=net.parameters())
    scheduler = instantiate(cfg.model.scheduler)(optimizer=optimizer)
    batch_size, clock = cfg.data.batch_size, Clock()
    for _ in range(epochs):
        clock.epoch_start()
        net.train()
        loss_sum, correct = torch.zeros(()), torch.zeros((), dtype=torch.long)
        for index in torch.randperm(len(train)).split(batch_size):
            clock.batch_start()
            x, y = train.inputs[index], train.targets[index]
            logits = net(x)
            loss = F.cross_entropy(logits, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach()
            correct += (logits.detach().argmax(-1) == y).sum()
            clock.batch_end()
        scheduler.step()
        clock.epoch_end()
        net.eval()
        with torch.inference_mode():
            val_loss, val_correct = torch.zeros(()), torch.zeros((), dtype=torch.long)
            for x, y in zip(
                val.inputs.split(batch_size), val.targets.split(batch_size), strict=True
            ):
                logits = net(x)
                val_loss += F.cross_entropy(logits, y, reduction="sum")
                val_correct += (logits.argmax(-1) == y).sum()
        # One read per epoch, as a loop that prints its progress would do.
        _ = (val_correct / len(val)).item(), (val_loss / len(val)).item(), correct.item()
    clock.finish(path)


class PlainModule(pl.LightningModule):
    """What a first Lightning version of this project looks like: log everything, every step."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.net = instantiate(cfg.model.net)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        loss = F.cross_entropy(logits, y)
        self.log("train/loss", loss, prog_bar=True)
        self.log("train/acc", (logits.argmax(-1) == y).float().mean(), prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        self.log("val/loss", F.cross_entropy(logits, y), prog_bar=True)
        self.log("val/acc", (logits.argmax(-1) == y).float().mean(), prog_bar=True)

    def configure_optimizers(self):
        optimizer = instantiate(self.cfg.model.optimizer)(params=self.parameters())
        return [optimizer], [instantiate(self.cfg.model.scheduler)(optimizer=optimizer)]


def manual_optimization(model: pl.LightningModule) -> pl.LightningModule:
    """The same model, trained with manual optimization: Lightning skips its closure and its
    per-step optimizer hooks, and the step does what the hand-written loop does."""

    class Manual(type(model)):
        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            optimizer = self.optimizers()
            optimizer.zero_grad(set_to_none=True)
            self.manual_backward(loss)
            optimizer.step()
            return loss

        def on_train_epoch_end(self):
            super().on_train_epoch_end()
            self.lr_schedulers().step()  # Lightning steps schedulers only for automatic optimization

    model.__class__ = Manual
    model.automatic_optimization = False
    return model


def lightning_loop(epochs: int, path: str, output_dir: str, manual: bool = False):
    """Lightning's loop alone: the project's model and datamodule, no callback, logger,
    checkpoint, progress bar or summary. What no change inside the project can go below."""
    cfg = project_config(epochs)
    pl.seed_everything(cfg.seed)
    model = instantiate(cfg.model, _recursive_=False, _convert_="all")
    trainer = pl.Trainer(
        max_epochs=epochs,
        default_root_dir=output_dir,
        log_every_n_steps=cfg.trainer.log_every_n_steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[EpochTimer(path)],
    )
    trainer.fit(manual_optimization(model) if manual else model, datamodule=instantiate(cfg.data))


def plain_lightning(epochs: int, path: str, output_dir: str):
    """Lightning's defaults (TensorBoard logger, TQDM progress bar, a checkpoint per epoch) with a
    per-sample TensorDataset: every sample is a Python call, every batch a collate."""
    cfg = project_config(epochs)
    pl.seed_everything(cfg.seed)
    datamodule = prepared_data(cfg)
    loaders = [
        DataLoader(
            TensorDataset(split.inputs, split.targets),
            batch_size=cfg.data.batch_size,
            shuffle=shuffle,
        )
        for split, shuffle in (
            (datamodule.splits["train"], True),
            (datamodule.splits["val"], False),
        )
    ]
    trainer = pl.Trainer(
        max_epochs=epochs, default_root_dir=output_dir, callbacks=[EpochTimer(path)]
    )
    trainer.fit(PlainModule(cfg), *loaders)


def loaders(path: str, seconds: float = 3.0):
    """Batches per second over whole epochs of the training split, each way of loading it."""
    cfg = project_config(1)
    datamodule = prepared_data(cfg)
    train, batch_size = datamodule.splits["train"], cfg.data.batch_size

    def sliced():
        return (
            (train.inputs[index], train.targets[index])
            for index in torch.randperm(len(train)).split(batch_size)
        )

    ways = {
        "datamodule": datamodule.train_dataloader,
        "TensorDataset": lambda: DataLoader(
            TensorDataset(train.inputs, train.targets), batch_size=batch_size, shuffle=True
        ),
        "index slicing (no DataLoader)": sliced,
    }
    rates = {name: [] for name in ways}
    for _ in range(3):  # interleaved windows, so a busy moment slows every way alike
        for name, make in ways.items():
            batches, start = 0, time.perf_counter()
            while time.perf_counter() - start < seconds / 3:
                for x, _ in make():
                    batches += 1
                    assert x.shape[1:] == (1, 8, 8)
            rates[name].append(batches / (time.perf_counter() - start))
    Path(path).write_text(json.dumps({name: max(values) for name, values in rates.items()}))


def image_loaders(path: str, root: str, seconds: float):
    """Images per second over the training split of an image folder, as training reads it
    (augmented, shuffled, in batches): from the files with 0, 1 and 2 worker processes, pinned
    memory on and off, and from the same images decoded once into memory, sliced in batches."""
    loaders = importlib.import_module(f"{PACKAGE}.data.loaders")
    # No setup cache: its default folder comes from Hydra's runtime, which a composed config lacks.
    cfg = project_config(1, ["data=images", f"data.root={root}", "data.cache_dir=null"])
    datamodule = instantiate(cfg.data, _convert_="all")
    datamodule.setup("fit")
    files, batch_size = datamodule.splits["train"], cfg.data.batch_size
    plain = type(files)(files.files, files.labels, files.preprocessing)  # decoded, not augmented
    inputs, labels = zip(*(plain[index] for index in range(len(plain))), strict=True)
    memory = loaders.InMemoryDataset(torch.stack(inputs), torch.tensor(labels))

    def loader(dataset, workers=0, pin=False):
        return loaders.make_loader(
            dataset, batch_size, True, workers, pin, persistent_workers=True
        )

    ways = {"memory": loader(memory)}
    for workers in (0, 1, 2):
        for pin in (False, True):
            ways[f"files, {workers} workers, pin_memory={pin}"] = loader(files, workers, pin)
    rates = {name: [] for name in ways}
    for _ in range(3):  # interleaved windows, so a busy moment slows every way alike
        for name, way in ways.items():
            for _ in way:  # a first epoch starts the workers (they persist) and warms caches
                pass
            images, start = 0, time.perf_counter()
            while time.perf_counter() - start < seconds / 3:
                for x, _ in way:
                    images += len(x)
            rates[name].append(images / (time.perf_counter() - start))
    rates = {name: max(values) for name, values in rates.items()}
    handover = handover_ms(loader(memory, workers=1))
    Path(path).write_text(json.dumps({"images_per_second": rates, "handover_ms": handover}))


def handover_ms(loader: DataLoader, step_s: float = 0.04, batches: int = 40) -> float:
    """Milliseconds the training process spends taking a batch from a worker process that has
    it ready (a step of `step_s` gave it the time): what every batch waits with workers, however
    fast they read. Median over `batches`."""
    for _ in loader:  # starts the worker, which persists
        pass
    times, iterator = [], iter(loader)
    while len(times) < batches:
        time.sleep(step_s)
        start = time.perf_counter()
        batch = next(iterator, None)
        if batch is None:
            iterator = iter(loader)  # a new epoch: its first batch is not ready yet
            continue
        times.append(time.perf_counter() - start)
    return 1000 * sorted(times)[len(times) // 2]


if __name__ == "__main__":
    kind, *args = sys.argv[1:]
    if kind == "handwritten":
        handwritten(int(args[0]), args[1], args[3:])
    elif kind == "plain_lightning":
        plain_lightning(int(args[0]), args[1], args[2])
    elif kind in ("lightning_loop", "lightning_manual"):
        lightning_loop(int(args[0]), args[1], args[2], manual=kind == "lightning_manual")
    elif kind == "loaders":
        loaders(args[0])
    elif kind == "image_loaders":
        image_loaders(args[0], args[1], float(args[2]))
    else:
        sys.exit(f"unknown baseline {kind}")
