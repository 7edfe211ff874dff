"""What a run records, read back from every logger's own files with that logger's own reader."""

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import ALLOWED, SHORT, SMALL_BATCHES, compose_config, made_once
from matplotlib.image import imread
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from {{ cookiecutter.package }}.builders import build_trained, build_trainer
from {{ cookiecutter.package }}.callbacks.confusion_matrix import draw as draw_confusion
from {{ cookiecutter.package }}.callbacks.figures import to_rgb
from {{ cookiecutter.package }}.checkpoints import load_checkpoint
from {{ cookiecutter.package }}.console import UserError
from {{ cookiecutter.package }}.records import git_state
from {{ cookiecutter.package }}.tasks.train import train

# MLflow's SQL store calls a loader strategy that SQLAlchemy deprecates. Python hides a
# DeprecationWarning raised inside a library from the commands' users; pytest shows it.
pytestmark = pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy is deprecated")
TAGS = ["digits", "readback"]
DIAGNOSTICS = ["train/grad_norm", "perf/samples_per_sec", "perf/data_wait_frac"]
# Logged at steps 1, 3, 5, ... (0-based) like train/loss: 2 epochs of 4 batches.
LOGGED_STEPS = [1, 3, 5, 7]
# What each task draws of a validation (`val/<name>`, plots/<name>.png), and the curves of a run.
PICTURES = {
    "classification": ["confusion_matrix"],
    "regression": ["predicted_vs_true", "residuals"],
}
CURVES = {"classification": ["loss", "accuracy", "lr"], "regression": ["loss", "lr"]}


@pytest.fixture(scope="module")
def logged_run(tmp_path_factory):
    """One short run with every logger at once; the tests below only read what it left."""
    import wandb

    overrides = [
        "logger=[csv,tensorboard,wandb,mlflow]",
        "+logger.wandb.offline=true",
        f"tags=[{','.join(TAGS)}]",
        "trainer.max_epochs=2",
        "callbacks.confusion_matrix.min_interval_s=0",  # a picture each validation, of either task
        "callbacks.regression_plots.min_interval_s=0",
        "trainer.log_every_n_steps=2",
        "+trainer.limit_train_batches=4",
        "+trainer.limit_val_batches=2",
        "+trainer.limit_test_batches=2",
        *SMALL_BATCHES,
    ]

    def log(output_dir):
        train(compose_config("train", output_dir, overrides))
        wandb.finish()  # what the logger config's Hydra callback does at the end of a CLI job

    output_dir = made_once(tmp_path_factory, "logged", log)
    return output_dir, compose_config("train", output_dir, overrides)


def test_csv_has_diagnostics_at_the_logging_steps_of_train_loss(logged_run):
    output_dir, _ = logged_run
    rows = list(csv.DictReader((output_dir / "csv" / "metrics.csv").open()))

    def steps(name):
        return [int(row["step"]) for row in rows if row.get(name)]

    assert steps("train/loss") == LOGGED_STEPS
    assert steps("lr-AdamW") == LOGGED_STEPS
    for name in DIAGNOSTICS:
        assert steps(name) == LOGGED_STEPS, name
    values = {name: [float(row[name]) for row in rows if row.get(name)] for name in DIAGNOSTICS}
    assert all(value > 0 and math.isfinite(value) for value in values["train/grad_norm"])
    assert all(value > 0 for value in values["perf/samples_per_sec"])
    assert all(0 <= value < 1 for value in values["perf/data_wait_frac"])
    hparams = yaml.safe_load((output_dir / "csv" / "hparams.yaml").read_text())
    assert hparams["tags"] == TAGS


def test_the_curves_hold_each_epoch_s_values_and_go_into_checkpoints(logged_run, task):
    output_dir, _ = logged_run
    rows = list(csv.DictReader((output_dir / "csv" / "metrics.csv").open()))
    last = load_checkpoint(output_dir / "checkpoints" / "last.ckpt")  # a resumed run draws them
    curves = last["callbacks"]["PlotCurves"]["history"]
    # The first epoch's values, at its last step: train/acc is reduced after the epoch's hooks.
    for name in ["val/loss", *(["train/acc"] if task == "classification" else [])]:
        (first,) = [float(row[name]) for row in rows if row.get(name) and row["epoch"] == "0"]
        assert curves[name][0] == [4, pytest.approx(first)], name


def test_tensorboard_event_files_hold_scalars_and_the_validation_pictures(logged_run, task, score):
    output_dir, _ = logged_run
    events = EventAccumulator(
        str(output_dir / "tensorboard"), size_guidance={"images": 0, "scalars": 0}
    )
    events.Reload()
    scores = {f"val/{score}", f"val/{score}_best", f"test/{score}"}
    assert {"train/loss", *scores, "lr-AdamW", *DIAGNOSTICS} <= set(events.Tags()["scalars"])
    assert [event.step for event in events.Scalars("train/grad_norm")] == LOGGED_STEPS
    for name in PICTURES[task]:
        images = events.Images(f"val/{name}")
        assert len(images) == 2  # one per validation epoch, sanity check excluded
        assert images[0].encoded_image_string.startswith(b"\x89PNG")
    assert (
        yaml.safe_load((output_dir / "tensorboard" / "hparams.yaml").read_text())["tags"] == TAGS
    )


def test_wandb_offline_run_file_read_back_with_wandb(logged_run, task, score):
    output_dir, _ = logged_run
    (run_file,) = output_dir.glob("wandb/offline-run-*/run-*.wandb")
    inspect = [sys.executable, "-m", "wandb", "leet", "inspect", str(run_file), "--json"]
    lines = subprocess.run(inspect, capture_output=True, text=True, check=True).stdout.splitlines()
    records = [json.loads(line) for line in lines]
    (run,) = [record["run"] for record in records if record["type"] == "run"]
    assert run["tags"] == TAGS
    config = {}
    for record in records:
        if record["type"] == "config":
            config |= record["config"]["update"]
    assert config["run"]["parameters"]["total"] > 0
    assert config["model"]["optimizer"]["lr"] == 0.003
    history = [record["history"]["item"] for record in records if record["type"] == "history"]
    logged = {key for item in history for key in item}
    assert {"train/loss", f"val/{score}", f"test/{score}", *DIAGNOSTICS} <= logged
    for name in PICTURES[task]:
        images = [item for item in history if f"val/{name}._type" in item]
        assert [image[f"val/{name}._type"] for image in images] == ["images/separated"] * 2
        for image in images:
            (filename,) = image[f"val/{name}.filenames"]
            assert (run_file.parent / "files" / filename).read_bytes().startswith(b"\x89PNG")


def test_mlflow_run_read_back_with_the_mlflow_client(logged_run, task, score):
    from mlflow.tracking import MlflowClient

    output_dir, cfg = logged_run
    client = MlflowClient(tracking_uri=cfg.logger.mlflow.tracking_uri)
    assert cfg.logger.mlflow.tracking_uri == f"sqlite:///{output_dir / 'logs' / 'mlflow.db'}"
    experiment = client.get_experiment_by_name(cfg.logger.mlflow.experiment_name)
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.params["tags"] == str(TAGS)
    assert run.data.params["model/optimizer/lr"] == "0.003"
    assert int(run.data.params["run/parameters/total"]) > 0
    scores = {f"val/{score}", f"val/{score}_best", f"test/{score}"}
    assert {*scores, *DIAGNOSTICS} <= run.data.metrics.keys()
    history = client.get_metric_history(run.info.run_id, "train/grad_norm")
    assert sorted(metric.step for metric in history) == LOGGED_STEPS
    images = [artifact.path for artifact in client.list_artifacts(run.info.run_id, "images")]
    assert sum(path.endswith(".png") for path in images) == 2 * len(PICTURES[task])
    assert Path(experiment.artifact_location.removeprefix("file://")).is_relative_to(
        output_dir / "logs"
    )


def test_plots_are_pngs_in_the_run_dir(logged_run, task):
    output_dir, _ = logged_run
    for name in [*CURVES[task], *PICTURES[task]]:
        image = imread(output_dir / "plots" / f"{name}.png")
        assert image.ndim == 3 and min(image.shape[:2]) > 100, name
    assert not list((output_dir / "plots").glob(".*"))  # no partial files left behind


def test_run_metadata_and_resolved_config_are_saved(logged_run):
    output_dir, _ = logged_run
    metadata = json.loads((output_dir / "run.json").read_text())
    # The model the run trained, as eval rebuilds it: its network sized for the run's data.
    model = build_trained(str(output_dir / "checkpoints" / "best.ckpt"), ALLOWED)[0]
    assert metadata["parameters"]["total"] == sum(
        parameter.numel() for parameter in model.parameters()
    )
    assert metadata["parameters"]["trainable"] == metadata["parameters"]["total"]
    versions = metadata["versions"]
    assert versions["torch"] == torch.__version__
    assert {"python", "pytorch_lightning", "{{ cookiecutter.project }}"} <= versions.keys()
    assert set(metadata["git"]) == {"commit", "dirty"}
    saved = (output_dir / "config.yaml").read_text()
    assert "${" not in saved
    assert yaml.safe_load(saved)["callbacks"]["plots"]["dirpath"] == str(output_dir / "plots")
    tree = (output_dir / "config_tree.log").read_text()
    assert "optimizer" in tree and "lr: 0.003" in tree


def test_git_state_names_the_commit_and_whether_the_tree_is_dirty(tmp_path):
    def git(*args):
        command = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
        return subprocess.run(
            command, cwd=tmp_path, check=True, capture_output=True, text=True
        ).stdout

    assert git_state(tmp_path) == {"commit": None, "dirty": None}
    git("init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", "code.py")
    git("commit", "-qm", "first")
    commit = git("rev-parse", "HEAD").strip()
    assert git_state(tmp_path) == {"commit": commit, "dirty": False}
    (tmp_path / "code.py").write_text("x = 2\n")
    assert git_state(tmp_path) == {"commit": commit, "dirty": True}


@pytest.mark.parametrize("package", ["wandb", "mlflow"])
def test_missing_logger_package_names_the_extra_before_training(package, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, package, None)  # what `import` sees when it is not installed
    cfg = compose_config("train", tmp_path, [f"logger={package}"])
    with pytest.raises(UserError, match=rf'pip install -e "\.\[{package}\]"') as error:
        build_trainer(cfg)
    assert "\n" not in str(error.value)
    assert not list(tmp_path.iterdir())  # nothing written


def test_the_progress_bar_reads_logged_metrics_at_logging_steps_only(tmp_path, monkeypatch):
    """On a GPU each read of the logged metrics makes the host wait for the device; Lightning's
    rich progress bar reads them after every batch, the project's only when new values arrive."""
    import pytorch_lightning as pl

    reads = []
    metrics = pl.Trainer.progress_bar_metrics
    monkeypatch.setattr(
        pl.Trainer,
        "progress_bar_metrics",
        property(lambda trainer: reads.append(trainer.global_step) or metrics.fget(trainer)),
    )
    overrides = [
        "logger=csv",
        "trainer.enable_model_summary=false",
        "trainer.max_epochs=2",
        "trainer.log_every_n_steps=4",
        "+trainer.limit_train_batches=8",
        "+trainer.limit_val_batches=2",
        "test=false",
        *SMALL_BATCHES,
    ]
    train(compose_config("train", tmp_path, overrides, quiet=False))
    assert set(reads) == {0, 4, 8, 12, 16}  # 0: the sanity-check validation


def test_a_regressor_draws_predicted_against_true_and_residuals(example_data, tmp_path):
    overrides = [
        "data=table",
        f"data.path={example_data['diabetes']}",
        "data.target=progression",
        "data.units='$/# in $1k'",  # Matplotlib reads what two dollar signs hold as a formula
        "model=regressor",
        "logger=tensorboard",
        "callbacks.regression_plots.min_interval_s=0",
        *SHORT,
    ]
    train(compose_config("train", tmp_path, overrides, quiet=False))
    plots = {path.name for path in (tmp_path / "plots").glob("*.png")}
    assert {"predicted_vs_true.png", "residuals.png"} <= plots
    assert "confusion_matrix.png" not in plots  # a picture of classes, for classifiers only
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"images": 0})
    events.Reload()
    assert {"val/predicted_vs_true", "val/residuals"} <= set(events.Tags()["images"])
    assert len(events.Images("val/residuals")) == 2  # one per validation epoch


def test_class_names_are_drawn_as_written_and_many_classes_by_number():
    names = ["under $5", "$5 to $10", "#1 for $5 or #2 for $9"]  # no formula, though two $
    prices = to_rgb(draw_confusion(np.eye(3, dtype=int), names))
    assert prices.ndim == 3 and prices.std() > 0
    many = draw_confusion(np.eye(100, dtype=int), [f"class {index}" for index in range(100)])
    ticks = [label.get_text() for label in many.axes[0].get_xticklabels()]
    assert ticks and not any("class" in tick for tick in ticks)  # too many names to read
