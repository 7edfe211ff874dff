"""Real training runs on the data configs/train.yaml names, in process."""

import csv
import json
import warnings

import probes
import pytest
import pytorch_lightning as pl
from conftest import (
    DIGITS,
    FEW_BATCHES,
    SHORT,
    chance,
    compose_config,
    default_datamodule,
    read_checkpoint,
    score_of,
)
from pytorch_lightning.callbacks import Checkpoint, EarlyStopping, ModelSummary, ProgressBar

from {{ cookiecutter.package }}.builders import build_trainer, data_kind
from {{ cookiecutter.package }}.checkpoints import load_checkpoint
from {{ cookiecutter.package }}.console import UserError
from {{ cookiecutter.package }}.tasks.train import train


def read_metrics(run_dir):
    return json.loads((run_dir / "metrics.json").read_text())


def learned(run_dir, data_dir) -> bool:
    """Did the run's model score better on the test split than the best guess without learning
    (always the most frequent class, or the training mean)?"""
    datamodule = default_datamodule(data_dir)
    return read_metrics(run_dir)[f"test/{score_of(datamodule)}"] > chance(datamodule)


def test_fast_dev_run(tmp_path, score):
    cfg = compose_config("train", tmp_path, ["debug=fdr"])
    train(cfg)
    assert f"test/{score}" in read_metrics(tmp_path)


def test_early_stopping_says_why_it_stopped_after_the_test(tmp_path, capsys, score):
    # An improvement by more than any loss can make: the validation loss never improves on the
    # first epoch's. (A learning rate of 0 would not hold it still: BatchNorm's statistics and
    # augmented samples move it.)
    overrides = [
        *FEW_BATCHES,
        "+trainer.limit_test_batches=2",
        "trainer.max_epochs=5",
        "callbacks.early_stopping.min_delta=1e9",
        "callbacks.early_stopping.patience=1",
    ]
    cfg = compose_config("train", tmp_path, overrides, quiet=False)
    train(cfg)
    lines = capsys.readouterr().out.splitlines()
    watched = f"Monitored metric {cfg.model.monitor} did not"
    assert lines[-2].startswith(f"stopped early after epoch 1: {watched}")
    assert lines[-1] == f"run directory: {tmp_path}"
    assert f"test/{score}" in read_metrics(tmp_path)


def test_default_config_leaves_its_metrics_and_checkpoints(trained_run, score):
    metrics = read_metrics(trained_run)
    assert metrics[f"test/{score}"] <= 1  # accuracy from 0, R² from minus infinity
    assert metrics[f"val/{score}_best"] >= metrics[f"val/{score}"]
    names = {"val/loss", f"val/{score}", f"val/{score}_best", "test/loss", "train/loss"}
    assert names <= metrics.keys()
    assert metrics["best_model_path"] == str(trained_run / "checkpoints" / "best.ckpt")
    assert (trained_run / "checkpoints" / "last.ckpt").is_file()


def test_short_run_learns(tmp_path):
    train(compose_config("train", tmp_path, SHORT))
    assert learned(tmp_path, tmp_path / "data")


def test_epochs_shorter_than_the_logging_interval_log_once_each_without_a_warning(tmp_path):
    # 6 training batches an epoch of the digits, trainer.log_every_n_steps=10 (the default).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(compose_config("train", tmp_path, [*DIGITS, *SHORT, "test=false"]))
    assert not [w for w in caught if "logging interval" in str(w.message)]
    rows = list(csv.DictReader((tmp_path / "csv" / "metrics.csv").open()))
    assert [int(row["step"]) for row in rows if row.get("lr-AdamW")] == [5, 11]


def test_trainer_flags_also_drop_the_callbacks_that_provide_the_feature(tmp_path):
    """With the default callbacks, Lightning alone refuses `enable_progress_bar=false` and
    `enable_checkpointing=false`, and still prints a summary with `enable_model_summary=false`."""
    flags = ["enable_progress_bar", "enable_model_summary", "enable_checkpointing"]
    overrides = ["logger=csv", *SHORT, *(f"trainer.{flag}=false" for flag in flags)]
    cfg = compose_config("train", tmp_path, overrides, quiet=False)
    callbacks = build_trainer(cfg).callbacks
    assert not [c for c in callbacks if isinstance(c, Checkpoint | ModelSummary | ProgressBar)]
    assert any(isinstance(c, EarlyStopping) for c in callbacks)  # the others stay
    train(cfg)
    assert read_metrics(tmp_path)["best_model_path"] == ""
    assert not (tmp_path / "checkpoints").exists()


def test_training_without_a_logger_still_writes_its_results(tmp_path):
    """Lightning refuses the learning-rate monitor without a logger; it is dropped instead."""
    train(compose_config("train", tmp_path, [*SHORT, "~logger"]))
    assert learned(tmp_path, tmp_path / "d")
    assert (tmp_path / "checkpoints" / "best.ckpt").is_file()


# Validation is off on purpose: the checkpoint callback then warns that the metric it watches
# (the default model's) is missing.
@pytest.mark.filterwarnings("ignore:`ModelCheckpoint\\(monitor='[^']*'\\)` could not find")
def test_validation_off_with_early_stopping_is_one_clear_line(tmp_path):
    cfg = compose_config(
        "train",
        tmp_path,
        ["trainer.max_epochs=2", "+trainer.limit_train_batches=6", "+trainer.limit_val_batches=0"],
    )
    with pytest.raises(UserError, match="turns validation off.*add ~callbacks.early_stopping"):
        build_trainer(cfg)
    overrides = [
        "trainer.max_epochs=2",
        "+trainer.limit_train_batches=6",
        "+trainer.limit_val_batches=0",
        "~callbacks.early_stopping",
    ]
    train(compose_config("train", tmp_path, overrides))
    assert read_metrics(tmp_path)["best_model_path"] == ""  # nothing to choose the best by


def test_checkpoints_hold_only_plain_values(trained_run):
    checkpoint = read_checkpoint(trained_run / "checkpoints" / "best.ckpt")
    # The network the model config declares for the data's kind, as a plain target.
    cfg = compose_config("train", trained_run / "cfg")
    net = cfg.model.nets[data_kind(cfg.data)]._target_
    assert checkpoint["hyper_parameters"]["net"]["_target_"] == net
    assert type(checkpoint["hyper_parameters"]) is dict


# Each resume writes to a run folder of its own on purpose: Lightning says it starts the
# checkpoint callback's records afresh there.
@pytest.mark.filterwarnings("ignore:The dirpath has changed from")
def test_resume_continues_the_epoch_count(tmp_path):
    first = compose_config("train", tmp_path / "first", [*SHORT, "test=false"])
    train(first)
    last = tmp_path / "first" / "checkpoints" / "last.ckpt"
    assert load_checkpoint(last)["epoch"] == 1  # epochs 0 and 1 done

    resumed = compose_config(
        "train",
        tmp_path / "resumed",
        [*SHORT, "trainer.max_epochs=4", f"ckpt_path={last}", "test=false"],
    )
    train(resumed)
    assert load_checkpoint(tmp_path / "resumed" / "checkpoints" / "last.ckpt")["epoch"] == 3
    logged_epochs = {
        int(row.split(",")[0])
        for row in (tmp_path / "resumed" / "csv" / "metrics.csv").read_text().splitlines()[1:]
        if row.split(",")[0]
    }
    assert min(logged_epochs) == 2  # nothing was trained again from epoch 0

    # A checkpoint further on than max_epochs allows is one line, before any training.
    further = tmp_path / "resumed" / "checkpoints" / "last.ckpt"  # at epoch 3
    beyond = compose_config(
        "train", tmp_path / "beyond", [*SHORT, "trainer.max_epochs=1", f"ckpt_path={further}"]
    )
    with pytest.raises(UserError, match="past trainer.max_epochs=1: raise trainer.max_epochs"):
        train(beyond)


@pytest.mark.parametrize(
    ("min_interval_s", "stop_early", "saved"),
    [(0, False, [0, 1, 2]), (3600, False, [2]), (3600, True, [1])],
    ids=["every epoch", "the last epoch", "the epoch early stopping ends"],
)
def test_last_ckpt_is_written_once_its_interval_has_passed_and_at_the_last_epoch(
    tmp_path, min_interval_s, stop_early, saved
):
    from {{ cookiecutter.package }}.builders import build_datamodule, build_model
    from {{ cookiecutter.package }}.callbacks import LastCheckpoint

    cfg = compose_config("train", tmp_path, SHORT)
    datamodule = build_datamodule(cfg)
    model, probe = build_model(cfg), probes.SavedEpochs()
    last = LastCheckpoint(
        dirpath=tmp_path / "checkpoints", filename="last", min_interval_s=min_interval_s
    )
    # No improvement can be this large: early stopping ends training after epoch 1.
    stopper = EarlyStopping(cfg.model.monitor, min_delta=1e9, patience=1, mode=cfg.model.mode)
    trainer = pl.Trainer(
        max_epochs=3,
        limit_train_batches=3,
        limit_val_batches=2,
        callbacks=[last, probe, *([stopper] if stop_early else [])],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, datamodule=datamodule)
    assert probe.epochs == saved
    assert load_checkpoint(tmp_path / "checkpoints" / "last.ckpt")["epoch"] == saved[-1]


def test_bf16_mixed_precision_trains_on_cpu(tmp_path):
    train(
        compose_config(
            "train", tmp_path, [*SHORT, "trainer.precision=bf16-mixed", "trainer.accelerator=cpu"]
        )
    )
    assert learned(tmp_path, tmp_path / "d")


def test_same_seed_gives_identical_metrics(tmp_path):
    overrides = [*SHORT, "trainer.deterministic=true", "seed=7"]
    runs = [tmp_path / "a", tmp_path / "b"]
    for run in runs:
        train(compose_config("train", run, overrides))
    first, second = (read_metrics(run) for run in runs)
    first.pop("best_model_path"), second.pop("best_model_path")
    assert first == second


def test_validation_runs_in_eval_mode_and_training_resumes_in_train_mode(tmp_path):
    from {{ cookiecutter.package }}.builders import (
        build_datamodule,
        build_model,
    )

    cfg = compose_config("train", tmp_path, SHORT)
    datamodule = build_datamodule(cfg)  # first: the model is built for the data's shapes
    model, probe = build_model(cfg), probes.ModeProbe()
    trainer = pl.Trainer(
        max_epochs=2,
        limit_train_batches=3,
        limit_val_batches=2,
        callbacks=[probe],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
    )
    trainer.fit(model, datamodule=datamodule)
    assert probe.during_validation == {False}  # Dropout off, BatchNorm on running statistics
    assert probe.during_training == {True}
