"""The debug configs do what their names promise."""

import json

import pytest
from conftest import FEW_BATCHES, QUIET, SMALL_BATCHES, compose_config, run_cli
from pytorch_lightning.profilers import SimpleProfiler

from {{ cookiecutter.package }}.builders import NoProfiler, build_trainer
from {{ cookiecutter.package }}.tasks.train import train


def test_overfit_drives_the_training_loss_near_zero(tmp_path):
    train(compose_config("train", tmp_path, ["debug=overfit", "test=false"]))
    assert json.loads((tmp_path / "metrics.json").read_text())["train/loss"] < 0.05


def test_simple_profiler_writes_its_summary_to_the_run_dir(tmp_path):
    train(compose_config("train", tmp_path, ["debug=profiler", *FEW_BATCHES, "test=false"]))
    assert "run_training_batch" in (tmp_path / "fit-profile.txt").read_text()


def test_without_a_profiler_the_hooks_run_unwrapped(tmp_path):
    # Lightning wraps every hook it calls in the profiler's `profile`: with none configured, no
    # context manager is built for each call.
    profiler = build_trainer(compose_config("train", tmp_path, [])).profiler
    assert isinstance(profiler, NoProfiler)
    assert profiler.profile("[Callback]a.on_train_batch_end") is profiler.profile("b")
    chosen = build_trainer(compose_config("train", tmp_path, ["+trainer.profiler=simple"]))
    assert isinstance(chosen.profiler, SimpleProfiler)


@pytest.mark.slow  # a train.py process
def test_torch_profiler_writes_a_trace_for_tensorboard(tmp_path):
    # A train.py process of its own, as users run it: a crash of the profiler (see the config)
    # fails this test rather than a pytest worker. Without loader workers: a worker forked
    # mid-trace crashed it too.
    overrides = ["debug=profiler_torch", *QUIET, *FEW_BATCHES, *SMALL_BATCHES, "test=false"]
    overrides += ["data.num_workers=0", f"hydra.run.dir={tmp_path}"]
    result = run_cli("train.py", *overrides)
    assert result.returncode == 0, result.stderr[-3000:]
    (trace,) = (tmp_path / "profiler").glob("*training_step*.pt.trace.json")
    assert json.loads(trace.read_text())["traceEvents"]
    assert (tmp_path / "profiler" / "fit-profile.txt").is_file()
