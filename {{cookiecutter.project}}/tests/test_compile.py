"""model.compile=true: training runs through torch.compile and leaves ordinary checkpoints."""

import pytest
import torch
from conftest import ALLOWED, compose_config, error_lines, run_cli

from {{ cookiecutter.package }} import targets
from {{ cookiecutter.package }}.builders import (
    build_datamodule,
    build_model,
    build_trained,
    build_trainer,
)
from {{ cookiecutter.package }}.checkpoints import load_checkpoint


def record_compiling(model) -> list[bool]:
    """For each call of the model's network: was it being traced by torch.compile?"""
    calls = []
    model.net.register_forward_pre_hook(lambda *_: calls.append(torch.compiler.is_compiling()))
    return calls


@pytest.mark.slow  # compiling the network's train and eval graphs takes a while on CPU
def test_compiled_training_saves_the_same_keys_and_reloads_eagerly(tmp_path):
    short = [
        "trainer.max_epochs=1",
        "+trainer.limit_train_batches=4",
        "+trainer.limit_val_batches=2",
        "trainer.log_every_n_steps=4",  # once an epoch of 4 batches, as train.py would set it
    ]
    cfg = compose_config("train", tmp_path, [*short, "model.compile=true"])
    datamodule = build_datamodule(cfg)  # first: the model is built for the data's shapes
    model = build_model(cfg)
    calls = record_compiling(model)
    build_trainer(cfg).fit(model, datamodule=datamodule)
    assert any(calls)

    best = tmp_path / "checkpoints" / "best.ckpt"
    eager_cfg = compose_config("train", tmp_path / "eager")
    build_datamodule(eager_cfg)
    eager = build_model(eager_cfg)
    assert load_checkpoint(best)["state_dict"].keys() == eager.state_dict().keys()
    # What eval and export do: rebuilt from the checkpoint, eager.
    reloaded = build_trained(best, ALLOWED)[0]
    calls = record_compiling(reloaded)
    inputs = next(iter(datamodule.val_dataloader()))[0][:2]
    target = datamodule.contract.target  # its task says how many numbers a sample gets
    assert reloaded(inputs).shape == (2, targets.get(target.task).outputs(target))
    assert calls == [False]


@pytest.mark.slow  # train.py as a process
def test_compiling_on_the_cpu_without_a_cpp_compiler_is_one_line_before_training(tmp_path):
    """Inductor would end the first step in a traceback, once the data is set up. CXX names a
    compiler that does not exist, the one inductor looks for."""
    overrides = ["model.compile=true", "trainer=cpu", f"hydra.run.dir={tmp_path / 'run'}"]
    result = run_cli("train.py", *overrides, env={"CXX": str(tmp_path / "no-such-g++")})
    assert result.returncode == 1 and "Traceback" not in result.stderr
    (line,) = error_lines(result)
    assert line.startswith("error: model.compile=true on the CPU needs a C++ compiler (")
    assert line.endswith("install g++ or point CXX at one, or train with model.compile=false")
    assert not (tmp_path / "run" / "checkpoints").exists()
