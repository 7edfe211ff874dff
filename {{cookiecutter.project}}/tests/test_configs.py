"""Every option of every config group composes, and what it describes can be built."""

import re
import sys

import pytest
import pytorch_lightning as pl
import torch
from conftest import (
    CONFIGS,
    DIGITS,
    SHIPPED_DATA,
    compose_config,
    example_overrides,
    suited_model,
)
from hydra.utils import instantiate

from {{ cookiecutter.package }} import targets
from {{ cookiecutter.package }}.builders import (
    build_datamodule,
    build_model,
    check_trainer_settings,
    instantiate_group,
)
from {{ cookiecutter.package }}.console import UserError
from {{ cookiecutter.package }}.options import (
    ExportOptions,
    PredictOptions,
    ServeOptions,
    validated,
)

GROUPS = ["data", "model", "trainer", "callbacks", "logger", "debug", "experiment"]
# How many devices of each accelerator this machine has; the CPU runs any number of processes.
DEVICES = {
    "cpu": sys.maxsize,
    "auto": sys.maxsize,
    "gpu": torch.cuda.device_count() or int(torch.backends.mps.is_available()),
    "mps": int(torch.backends.mps.is_available()),
}


def options(group: str) -> list[str]:
    return sorted(path.stem for path in (CONFIGS / group).glob("*.yaml"))


CASES = [(group, option) for group in GROUPS for option in options(group)]


@pytest.mark.parametrize(("group", "option"), CASES, ids=[f"{g}={o}" for g, o in CASES])
def test_option_composes_and_instantiates(group, option, tmp_path, monkeypatch, request):
    monkeypatch.setenv("WANDB_MODE", "offline")
    # A shipped data option reads the example data (one of your own, its own, with a model of
    # its task), and the project's models example data of their task; the others build on the
    # default data.
    data = []
    if group == "data" and option in SHIPPED_DATA:
        data = example_overrides(option, request.getfixturevalue("example_data"))
    elif group == "data" and option == "stream":
        data = [f"data.input_dir={request.getfixturevalue('stream')}"]
    elif group == "data":
        data = suited_model(option, tmp_path / "task")
    if group == "model" and option == "classifier":
        data = DIGITS
    if group == "model" and option == "regressor":
        regression = example_overrides("table+regressor", request.getfixturevalue("example_data"))
        data = ["data=table", *regression]
    cfg = compose_config("train", tmp_path, [f"{group}={option}", *data], quiet=False)
    # The data first: it decides the shapes the model is built for.
    datamodule = build_datamodule(cfg)
    assert datamodule.hparams.batch_size > 0
    # A stream's kind, and so its network, comes from its contract, which only the data reads.
    model = build_model(cfg, datamodule if option == "stream" else None)
    assert isinstance(model, pl.LightningModule)
    # The project's models build a network; a module of the user's own builds as it is.
    assert getattr(model, "net", model) is not None
    assert all(callback is not None for callback in instantiate_group(cfg.callbacks))
    assert all(logger.save_dir or logger.name for logger in instantiate_group(cfg.logger))
    devices = cfg.trainer.devices
    if DEVICES[cfg.trainer.accelerator] >= (max(devices, 1) if isinstance(devices, int) else 1):
        instantiate(cfg.trainer)
    else:
        # A preset for devices this machine lacks (a GPU, Apple silicon, more GPUs than it has)
        # is refused in one line that names the setting.
        with pytest.raises(UserError, match=r"^trainer\.(accelerator|devices)=\S+: this machine"):
            check_trainer_settings(cfg.trainer)


def test_every_group_has_options():
    assert all(options(group) for group in GROUPS)


def test_eval_config_composes(tmp_path):
    cfg = compose_config("eval", tmp_path, ["ckpt_path=some.ckpt"])
    assert cfg.ckpt_path == "some.ckpt"
    assert "model" not in cfg  # the model comes from the checkpoint


def test_mlp_is_selectable(tmp_path):
    cfg = compose_config("train", tmp_path, ["model/net=mlp"])
    build_datamodule(cfg)  # the shapes the network is built for
    assert type(build_model(cfg).net).__name__ == "MLP"


def test_the_default_trainer_declares_strategy_and_num_nodes(tmp_path):
    # Overridable without '+': python train.py trainer.strategy=ddp trainer.devices=2
    overrides = ["trainer.strategy=ddp", "trainer.devices=2", "trainer.num_nodes=1"]
    trainer = compose_config("train", tmp_path, overrides).trainer
    assert (trainer.strategy, trainer.devices, trainer.num_nodes) == ("ddp", 2, 1)


# A network's settings, and the data config's keys they are read from.
SHAPES = {
    "in_channels": "channels",
    "image_size": "image_size",
    "in_features": "num_features",
    "vocab_size": "vocab_size",
}


def test_network_shapes_come_from_the_data_config(tmp_path):
    for overrides in ([], ["model/net=mlp"]):  # the data kind's network, and the MLP
        cfg = compose_config("train", tmp_path, overrides)
        datamodule = build_datamodule(cfg)  # the data's shapes, into cfg.data
        if overrides and datamodule.contract.input.dtype != "float32":
            continue  # token ids, which the MLP does not take
        build_model(cfg, datamodule)  # the network chosen for the data, into cfg.model.net
        net = cfg.model.net
        shapes = {key: net[key] for key in SHAPES if key in net}
        assert shapes and shapes == {key: cfg.data[SHAPES[key]] for key in shapes}
        assert None not in shapes.values()
        target = datamodule.contract.target  # classes, or one value
        assert net.num_classes == targets.get(target.task).outputs(target)


@pytest.mark.parametrize(
    ("data", "overrides", "network"),
    [
        ("images", [], "SmallCNN"),
        ("table", [], "MLP"),
        ("table+regressor", [], "MLP"),
        ("table", ["model/net=transformer"], "Transformer"),
        ("images", ["model/net=mlp", "model.net.width=16"], "MLP"),
    ],
)
def test_the_model_config_picks_the_network_for_the_datas_kind(
    data, overrides, network, example_data, tmp_path
):
    # No data config names a network: the model's config declares one per input kind.
    data_overrides = [f"data={data.split('+')[0]}", *example_overrides(data, example_data)]
    cfg = compose_config("train", tmp_path, [*data_overrides, *overrides])
    model = build_model(cfg, build_datamodule(cfg))
    assert type(model.net).__name__ == network
    assert "nets" not in cfg.model  # the checkpoint records the network that was chosen
    if not overrides and data.startswith("table"):
        assert cfg.model.net.dropout == 0.5  # the table network's own setting


@pytest.mark.parametrize(
    ("data", "kind", "net", "network"),
    [
        ("images", "image", "bag", "TokenBag"),
        ("table", "table", "cnn", "SmallCNN"),
        ("text", "text", "mlp", "MLP"),  # token ids, which it would multiply as numbers
    ],
)
def test_a_network_that_cannot_take_the_datas_inputs_is_one_line(
    data, kind, net, network, example_data, tmp_path
):
    overrides = [f"data={data}", *example_overrides(data, example_data), f"model/net={net}"]
    cfg = compose_config("train", tmp_path, overrides)
    with pytest.raises(UserError) as refused:
        build_model(cfg, build_datamodule(cfg))
    line = str(refused.value)
    assert line.startswith(f"model.net {network} cannot take the data's {kind} inputs (")
    assert line.endswith(f"declares for {kind} inputs, or choose one that takes them")


@pytest.mark.parametrize(
    ("data", "tokens"),
    # Images: a 2x2 grid of patches; the breast cancer table: one token per feature; texts: one
    # per token, up to max_length (128). And CLS.
    [("digits", 5), ("images", 5), ("table", 31), ("text", 129)],
)
def test_the_transformer_is_built_for_the_data(data, tokens, example_data, tmp_path):
    overrides = [f"data={data}", *example_overrides(data, example_data), "model/net=transformer"]
    cfg = compose_config("train", tmp_path, overrides)
    datamodule = build_datamodule(cfg)
    net = build_model(cfg, datamodule).net
    inputs, _ = next(iter(datamodule.train_dataloader()))
    assert net.tokens(inputs).shape[1] + 1 == tokens
    assert net(inputs).shape == (len(inputs), datamodule.shapes["num_classes"])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.net.heads=5", "model.net.dim=64 must be a multiple of model.net.heads=5"),
        ("model.net.grid=3", "model.net.grid=3 does not divide data.image_size=8 into patches"),
    ],
)
def test_transformer_settings_that_cannot_work_are_one_line(override, message, tmp_path):
    # The digits' 8x8 images, which a grid of 3 does not divide.
    cfg = compose_config("train", tmp_path, [*DIGITS, "model/net=transformer", override])
    with pytest.raises(UserError, match="^" + re.escape(message)):
        build_model(cfg)


@pytest.mark.parametrize(
    ("net", "override", "message"),
    [
        ("cnn", "model.net.width=0", "model.net.width=0 must be a whole number of at least 1"),
        ("mlp", "model.net.depth=0", "model.net.depth=0 must be a whole number of at least 1"),
        ("mlp", "model.net.depth=1.5", "model.net.depth=1.5 must be a whole number"),
        ("mlp", "model.net.dropout=2", "model.net.dropout=2 must be a fraction from 0 to below 1"),
        ("transformer", "model.net.dim=-8", "model.net.dim=-8 must be a whole number of at least"),
    ],
)
def test_network_sizes_and_dropout_that_cannot_work_are_one_line(net, override, message, tmp_path):
    cfg = compose_config("train", tmp_path, [f"model/net={net}", override])
    with pytest.raises(UserError, match="^" + re.escape(message)):
        build_model(cfg)


COMMANDS = {
    "export": (ExportOptions, ["ckpt_path=a.ckpt"]),
    "predict": (PredictOptions, ["model_path=export", "input=a.npy"]),
    "serve": (ServeOptions, ["model_path=export"]),
}
# What a command's config holds besides its options.
NOT_OPTIONS = {"task_name", "paths", "allowed_targets"}


@pytest.mark.parametrize("command", COMMANDS)
def test_a_commands_options_are_its_configs_and_its_defaults_pass(command, tmp_path):
    """Each option is declared in options.py and has its default and comment in the YAML file:
    neither holds one that the other lacks."""
    kind, required = COMMANDS[command]
    cfg = compose_config(command, tmp_path, required, quiet=False)
    assert set(cfg) - NOT_OPTIONS == set(kind.model_fields)
    options = validated(kind, cfg, newest_opset=99)
    assert options.model_dump() == {name: cfg[name] for name in kind.model_fields}
