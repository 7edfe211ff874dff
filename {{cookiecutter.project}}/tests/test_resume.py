"""Runs that survive being killed or stopped: atomic checkpoints, auto-resume, SIGTERM and Ctrl-C
as failures that say how to resume, run directories that keep their records, and a NaN guard."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from conftest import (
    EVERY_EPOCH,
    FEW_BATCHES,
    QUIET,
    ROOT,
    SMALL_BATCHES,
    compose_config,
    error_lines,
    run_cli,
    start_cli,
    stop_at_epoch,
    with_model,
)
from omegaconf import OmegaConf

from {{ cookiecutter.package }}.checkpoints import (
    load_checkpoint,
    resume_path,
)
from {{ cookiecutter.package }}.console import UserError
from {{ cookiecutter.package }}.tasks.train import note_other_settings, train

THREE_EPOCHS = [*FEW_BATCHES, "trainer.max_epochs=3"]


def test_resume_path_prefers_ckpt_path_then_the_runs_own_last_checkpoint(trained_run, tmp_path):
    last = trained_run / "checkpoints" / "last.ckpt"
    best = trained_run / "checkpoints" / "best.ckpt"
    assert resume_path(compose_config("train", trained_run)) == str(last)
    assert resume_path(compose_config("train", trained_run, [f"ckpt_path={best}"])) == str(best)
    assert resume_path(compose_config("train", trained_run, ["auto_resume=false"])) is None
    assert resume_path(compose_config("train", tmp_path)) is None  # a fresh run directory
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(last.read_bytes()[:1000])
    with pytest.raises(UserError, match="is not a readable checkpoint"):
        resume_path(compose_config("train", tmp_path))


def test_resuming_on_other_data_than_the_checkpoints_is_one_line(trained_run, tmp_path):
    # A table of its own: other inputs and classes than any data the run could have had.
    rows = [f"{i % 7},{i % 5},{'odd-row' if i % 2 else 'even-row'}" for i in range(60)]
    (tmp_path / "rows.csv").write_text("\n".join(["first,second,parity", *rows]))
    table = ["data=table", f"data.path={tmp_path / 'rows.csv'}", "data.target=parity"]
    best = trained_run / "checkpoints" / "best.ckpt"
    cfg = compose_config("train", tmp_path / "run", [f"ckpt_path={best}", *table])
    with pytest.raises(UserError) as error:
        train(cfg)
    line = str(error.value)
    assert line.startswith(f"{best} was trained on other data: ") and "\n" not in line
    advice = "; resume on the data it was trained on, or train anew without ckpt_path"
    assert " there, " in line and line.endswith(advice)
    assert not (tmp_path / "run" / "metrics.json").exists()


@pytest.mark.slow
def test_a_killed_run_resumes_to_the_same_result(tmp_path):
    short = ["+trainer.limit_train_batches=10", "+trainer.limit_val_batches=2", "test=false"]
    overrides = [*QUIET, *short, *EVERY_EPOCH, "trainer.max_epochs=5", "seed=3"]
    overrides.append("trainer.deterministic=true")
    train(compose_config("train", tmp_path / "whole", overrides[len(QUIET) :]))

    run_dir = tmp_path / "killed"
    script = [sys.executable, str(ROOT / "train.py")]  # as run_cli runs it, and with its model
    command = [*script, *with_model("train.py", overrides), f"hydra.run.dir={run_dir}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    last = run_dir / "checkpoints" / "last.ckpt"
    with subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    ) as process:
        # last.ckpt is replaced atomically, so it can be read while the run goes on.
        while process.poll() is None and not (
            last.is_file() and load_checkpoint(last)["epoch"] >= 1
        ):
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
    assert process.returncode == -signal.SIGKILL
    assert load_checkpoint(last)["epoch"] < 4 and not (run_dir / "metrics.json").exists()

    result = run_cli("train.py", *overrides, f"hydra.run.dir={run_dir}")  # the same command
    assert result.returncode == 0, result.stderr[-3000:]
    assert "note: model." not in result.stdout  # the same settings as its checkpoint's
    assert f"Restoring states from the checkpoint path at {last}" in result.stdout + result.stderr
    whole, resumed = (
        load_checkpoint(path / "checkpoints" / "last.ckpt")
        for path in (tmp_path / "whole", run_dir)
    )
    assert (resumed["epoch"], resumed["global_step"]) == (whole["epoch"], whole["global_step"])
    metrics = [
        json.loads((path / "metrics.json").read_text()) for path in (tmp_path / "whole", run_dir)
    ]
    for run in metrics:
        run.pop("best_model_path")
    assert metrics[0] == metrics[1]


def test_model_settings_other_than_the_resumed_checkpoint_s_are_noted(capsys):
    model = {"_target_": "models.Net", "optimizer": {"lr": 0.1}, "dropout": 0.2}
    checkpoint = {"config": {"model": model}}
    note_other_settings(checkpoint, OmegaConf.create(model), "last.ckpt")
    assert capsys.readouterr().out == ""
    faster = OmegaConf.create({**model, "optimizer": {"lr": 0.5}})
    note_other_settings(checkpoint, faster, "last.ckpt")
    assert capsys.readouterr().out == (
        "note: model.optimizer.lr=0.5 here, 0.1 in last.ckpt (1 setting of the model differs): "
        "resuming restores the optimizer's and the scheduler's state from it, their learning "
        "rate too\n"
    )


def files(run_dir) -> dict:
    return {path: path.read_bytes() for path in run_dir.rglob("*") if path.is_file()}


def ignore_ctrl_c() -> None:
    """As a shell starts a script's background job: with SIGINT ignored, which exec keeps."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.slow  # a train.py process, interrupted
def test_ctrl_c_stops_a_run_started_with_it_ignored(tmp_path):
    run_dir = tmp_path / "run"
    short = ["+trainer.limit_train_batches=4", "+trainer.limit_val_batches=1"]
    command = [*QUIET, *short, *EVERY_EPOCH, "trainer.max_epochs=20", f"hydra.run.dir={run_dir}"]
    process = start_cli("train.py", *command, preexec_fn=ignore_ctrl_c)
    result = stop_at_epoch(process, run_dir / "checkpoints" / "last.ckpt", 0, signal.SIGINT)
    assert result.returncode == 128 + signal.SIGINT, result.stderr[-3000:]
    assert error_lines(result) == [
        "error: training stopped by Ctrl-C (SIGINT); to resume, rerun the same command with "
        f"hydra.run.dir={run_dir}"
    ]
    assert not (run_dir / "metrics.json").exists()


@pytest.mark.slow
def test_a_stopped_run_fails_then_resumes_and_its_directory_keeps_its_records(
    tmp_path, score, watched
):
    run_dir = tmp_path / "run"
    last = run_dir / "checkpoints" / "last.ckpt"
    short = ["+trainer.limit_train_batches=4", "+trainer.limit_val_batches=1"]
    command = [*QUIET, *short, *EVERY_EPOCH, "trainer.max_epochs=20", f"hydra.run.dir={run_dir}"]
    resume = f"to resume, rerun the same command with hydra.run.dir={run_dir}"

    # Ctrl-C, then SIGTERM in the resumed run: neither passes for a success.
    epoch = 0
    for signum, name in ((signal.SIGINT, "Ctrl-C (SIGINT)"), (signal.SIGTERM, "SIGTERM")):
        result = stop_at_epoch(start_cli("train.py", *command), last, epoch, signum)
        assert result.returncode == 128 + signum, result.stderr[-3000:]
        assert error_lines(result) == [f"error: training stopped by {name}; {resume}"]
        assert "Traceback" not in result.stderr
        assert not (run_dir / "metrics.json").exists()
        epoch = load_checkpoint(last)["epoch"] + 1
    assert f"Restoring states from the checkpoint path at {last}" in result.stdout + result.stderr

    result = run_cli("train.py", *command)  # the command it says, which completes the run
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert {"train/loss", f"val/{score}", f"val/{score}_best", f"test/{score}"} <= metrics.keys()

    # Once more: the run is complete and nothing changes (Hydra's log only grows).
    before = files(run_dir)
    result = run_cli("train.py", *command)
    assert result.returncode == 0, result.stderr[-3000:]
    best = f"{watched[0]}_best"
    assert f"run {run_dir} is complete ({best}={metrics[best]})" in result.stdout
    after = files(run_dir)
    assert after.pop(run_dir / "train.log").startswith(before.pop(run_dir / "train.log"))
    assert after == before

    # Another config, or another task, stops before writing anything.
    before = files(run_dir)
    other_config = run_cli("train.py", *command, "trainer.max_epochs=21")
    best = run_dir / "checkpoints" / "best.ckpt"
    other_task = run_cli("eval.py", f"ckpt_path={best}", f"hydra.run.dir={run_dir}")
    # The same, with the run directory elsewhere and the task's files sent into the run's.
    sent_in = run_cli(
        "eval.py",
        f"ckpt_path={best}",
        f"paths.output_dir={run_dir}",
        f"hydra.run.dir={tmp_path / 'eval'}",
    )
    assert error_lines(other_config) == [
        f"error: {run_dir} holds a run with other settings (trainer.max_epochs was 20, now 21): "
        "rerun it with its own settings to resume it, or choose a new hydra.run.dir"
    ]
    assert error_lines(other_task) == [
        f"error: {run_dir} holds a train run; eval writes to a run directory of its own: leave "
        "out hydra.run.dir or choose a new one"
    ]
    assert error_lines(sent_in) == [
        f"error: {run_dir} holds a train run; eval writes to a run directory of its own: leave "
        "out paths.output_dir or choose a new one"
    ]
    assert other_config.returncode == other_task.returncode == sent_in.returncode == 1
    assert files(run_dir) == before


@pytest.mark.slow  # train.py as processes
def test_files_sent_apart_from_the_run_directory_keep_the_run_s_settings_too(tmp_path, watched):
    """paths.output_dir puts the run's files apart from its run directory, which is new each
    time: the settings go with the files, and a run with others is refused there too, rather
    than reporting (or resuming) the earlier run as its own."""
    output_dir = tmp_path / "files"
    command = [*QUIET, *FEW_BATCHES, "trainer.max_epochs=1", f"paths.output_dir={output_dir}"]
    first = run_cli("train.py", *command, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    before = files(output_dir)
    again = run_cli("train.py", *command, cwd=tmp_path)
    assert again.returncode == 0
    assert f"is complete ({watched[0]}_best=" in again.stdout
    assert "to train again, choose a new paths.output_dir" in again.stdout
    other = run_cli("train.py", *command, "model.optimizer.lr=0.01", cwd=tmp_path)
    lr = compose_config("train", tmp_path / "default").model.optimizer.lr
    assert error_lines(other) == [
        f"error: {output_dir} holds a run with other settings (model.optimizer.lr was {lr}, now "
        "0.01): rerun it with its own settings to resume it, or choose a new paths.output_dir"
    ]
    assert other.returncode == 1 and files(output_dir) == before


def test_a_kill_while_saving_keeps_the_previous_checkpoint(tmp_path):
    target = tmp_path / "last.ckpt"
    # Saves a good checkpoint, then dies by SIGKILL once the next one is on disk but not yet in
    # place: the moment a writer without a temporary file would already have destroyed the old.
    code = """
import os, signal, sys, torch
from pathlib import Path
from {{ cookiecutter.package }}.saving import AtomicCheckpointIO

io, target = AtomicCheckpointIO(), Path(sys.argv[1])
io.save_checkpoint(dict(state_dict=dict(w=torch.zeros(1)), epoch=1), target)
os.replace = lambda *args: os.kill(os.getpid(), signal.SIGKILL)
io.save_checkpoint(dict(state_dict=dict(w=torch.ones(2**20)), epoch=2), target)
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    result = subprocess.run(
        [sys.executable, "-c", code, str(target)], env=env, capture_output=True, timeout=120
    )
    assert result.returncode == -signal.SIGKILL, result.stderr[-2000:]
    assert (tmp_path / ".last.partial.ckpt").stat().st_size > 2**22  # the new one was written
    assert load_checkpoint(target)["epoch"] == 1


# The loss is read on the host at logging steps and before checkpoints. Poisoned before step 8,
# the third batch of epoch 1: found at the logging step 10; with no logging step left in the
# epoch, found when epoch 1's checkpoints are about to be written.
@pytest.mark.parametrize("log_every_n_steps", [10, 50])
def test_a_nan_loss_stops_with_one_line_and_keeps_the_checkpoints(tmp_path, log_every_n_steps):
    poison = ["+callbacks.poison._target_=probes.PoisonWeights", "+callbacks.poison.step=8"]
    logging = [f"trainer.log_every_n_steps={log_every_n_steps}", *SMALL_BATCHES]
    with pytest.raises(UserError, match=r"train/loss is NaN or infinite at step 8 \(epoch 1\)"):
        train(compose_config("train", tmp_path, [*THREE_EPOCHS, *EVERY_EPOCH, *poison, *logging]))
    last = load_checkpoint(tmp_path / "checkpoints" / "last.ckpt")
    assert last["epoch"] == 0
    assert all(
        torch.isfinite(value).all()
        for value in last["state_dict"].values()
        if value.is_floating_point()
    )
    assert not (tmp_path / "metrics.json").exists()
