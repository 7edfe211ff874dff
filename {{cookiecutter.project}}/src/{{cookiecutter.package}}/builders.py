"""Builds the objects every task needs from its config: train, eval and export share one recipe."""

import importlib
import inspect
import math
import re
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

import pytorch_lightning as pl
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import MISSING, DictConfig, OmegaConf, open_dict
from pytorch_lightning.accelerators import AcceleratorRegistry, CPUAccelerator
from pytorch_lightning.callbacks import (
    Checkpoint,
    EarlyStopping,
    LearningRateMonitor,
    ModelSummary,
    ProgressBar,
)
from pytorch_lightning.profilers import PassThroughProfiler
from pytorch_lightning.utilities import rank_zero_info
from pytorch_lightning.utilities.exceptions import MisconfigurationException

from . import targets
from .checkpoints import imported, trained_configs
from .console import UserError
from .contract import Input, Target
from .options import DATA, check_seed, validated
from .saving import ConfigInCheckpoint
from .upstream import call_callbacks_that_define_each_hook, record_sigterm_without_collectives

# Loggers whose package is an optional extra of this project, by class name; extra = package.
LOGGER_EXTRAS = {"WandbLogger": "wandb", "MLFlowLogger": "mlflow"}
# Trainer flags that switch a feature off, and the callbacks that provide it. Lightning refuses a
# progress bar or checkpoint callback when its flag is off, and keeps a summary callback printing.
FEATURE_FLAGS = {
    "enable_progress_bar": ProgressBar,
    "enable_model_summary": ModelSummary,
    "enable_checkpointing": Checkpoint,
}


# Arguments of these types (or None), what they take, and the values that are that. A name or
# text may be written as a number (a column named 2024), not as a list.
PLAIN_TYPES = {
    frozenset({bool}): ("true or false", (bool,)),
    frozenset({int}): ("a whole number", (int,)),
    frozenset({float}): ("a number", (int, float)),
    frozenset({int, float}): ("a number", (int, float)),
    frozenset({str}): ("one value, not a list", (str, int, float)),
}

# One context for every call: it does nothing on entering or leaving.
NOTHING = nullcontext()


class NoProfiler(PassThroughProfiler):
    """Lightning's default profiler, which records nothing, at no cost. Lightning runs each hook
    it calls, on the model and on every callback, inside `profiler.profile(...)`: about 2,000
    times an epoch of the example, and the default builds a context manager each time, 1.3 us,
    about 1 % of the example's epoch (the template's benchmarks/README.md)."""

    def profile(self, action_name: str) -> AbstractContextManager:
        return NOTHING


def instantiate_group(group: DictConfig | None) -> list:
    """Every entry of a group like `callbacks` or `logger` that names a `_target_`."""
    if not group:
        return []
    if "_target_" in group:
        return [instantiated(group)]
    return [instantiated(entry) for entry in group.values() if entry and "_target_" in entry]


def seed_everything(seed: int | None) -> None:
    """Seeds Python, NumPy and torch, in DataLoader workers too; None draws a seed."""
    check_seed(seed)
    pl.seed_everything(seed, workers=True)


def build_datamodule(cfg: DictConfig, resumed: dict | None = None) -> pl.LightningDataModule:
    """The datamodule, set up, with the shapes that only the data knows (number of classes,
    of features) written into `cfg.data`. They go there, rather than to the model directly,
    because model configs read them as `${data.num_classes}`: a LightningModule of the user's
    own gets them as any data setting, and the checkpoint records the resolved values.
    `resumed`: the checkpoint that training resumes from."""
    target_of(cfg.data, "data")
    validated(DATA, cfg.data, prefix="data.")  # one line, before a DataLoader fails on it
    check_values(cfg.data, "data")
    datamodule = instantiated(cfg.data, _convert_="all")  # plain hyperparameters in checkpoints
    adopt_network_preprocessing(cfg, datamodule, resumed)
    # Before the model exists, and in every process: the networks are built for these shapes.
    # A prepare_data that downloads must therefore leave files that are already there alone.
    datamodule.prepare_data()
    datamodule.setup()
    # None (does not apply) only over a value the config gave: the digits' 10 classes, read as
    # numbers with data.task=regression, are none.
    known = {key: value for key, value in datamodule.shapes.items() if value is not None}
    claimed = {key: None for key in datamodule.shapes if cfg.data.get(key) is not None}
    with open_dict(cfg.data):
        cfg.data.update({**claimed, **known})
    return datamodule


def adopt_network_preprocessing(
    cfg: DictConfig, datamodule: pl.LightningDataModule, resumed: dict | None
) -> None:
    """Gives the datamodule the preprocessing that a pretrained network brings (its image
    processor's, its tokenizer), to use instead of fitting one: `data_preprocessing(net, kind,
    data)` of the network's class, if it has one. Resuming, the checkpoint's record of both (the
    backbone, the preprocessing) is used instead: nothing is fetched again."""
    net = cfg.get("model", {}).get("net")
    if not net or "_target_" not in net:
        return
    own = getattr(target_of(net, "model.net"), "data_preprocessing", None)
    if own is None:
        return
    if not getattr(datamodule, "adopts_preprocessing", False):
        raise UserError(
            f"{net._target_} brings its own preprocessing, which {cfg.data._target_} cannot "
            "apply; use data=images or data=text"
        )
    recorded = (resumed or {}).get("config", {})
    backbone = recorded.get("model", {}).get("net", {}).get("backbone")
    if backbone:
        with open_dict(cfg.model):
            cfg.model.net.backbone = backbone
        datamodule.given = recorded["contract"]["preprocessing"]
        return
    datamodule.given = own(net, datamodule.kind, cfg.data)


def build_model(cfg: DictConfig, datamodule=None) -> pl.LightningModule:
    """The model; with `datamodule`, first checked to be made for the data's task. A network
    that records what rebuilding it needs (a pretrained backbone's class and configuration) adds
    it to `model.net`, which the checkpoint keeps."""
    check_values(cfg.model, "model")  # named as set: model.nets.image.dropout
    choose_network(cfg, datamodule)
    check_values(cfg.model.get("net"), "model.net")  # with settings that no network declared
    if datamodule is not None:
        check_task(target_of(cfg.model, "model"), datamodule)
        check_from_data(cfg.model, datamodule.shapes)
        check_network(cfg.model.get("net"), datamodule.contract.input)
    model = instantiate_for_data(cfg.model, datamodule)
    record = getattr(getattr(model, "net", None), "record", None)
    if callable(record):
        with open_dict(cfg.model):
            cfg.model.net.update(record())
    return model


def choose_network(cfg: DictConfig, datamodule=None) -> None:
    """Sets `model.net` to the network that `model.nets` declares for the data's input kind (the
    datamodule's, which a stream reads off its contract; else the data config's class's),
    unless model/net=<name> chose one; a `model.net` without a `_target_` holds settings for the
    kind's network (e.g. debug=overfit's dropout). In place, because the checkpoint records this
    config: eval and export rebuild the same network from it. Modules without `nets` (a
    LightningModule of the user's own) are left as they are."""
    nets = cfg.model.get("nets")
    if nets is None:
        return
    net = cfg.model.get("net")
    if net is None or "_target_" not in net:
        kind = datamodule.kind if datamodule is not None else data_kind(cfg.data)
        if kind not in nets:
            raise UserError(
                f"model.nets declares no network for {kind} inputs ({', '.join(nets)}): add "
                f"model.nets.{kind}, or choose one with model/net=<cnn, mlp, transformer or bag>"
            )
        check_settings_of(nets[kind], net or {}, kind)
        net = OmegaConf.merge(nets[kind], net or {})
    with open_dict(cfg.model):
        cfg.model.net = net
        del cfg.model.nets


# The settings of a model or network that its config reads from the data's shapes, and the noun
# for each shape.
FROM_DATA = {
    "num_classes": ("num_classes", "classes"),
    "in_channels": ("channels", "channels"),
    "in_features": ("num_features", "features"),
}


def check_settings_of(network: DictConfig, settings: DictConfig | dict, kind: str) -> None:
    """One line for a model.net setting that the kind's network does not take (a search over
    the MLP's width, run on texts), where merging them would end in OmegaConf's traceback."""
    unknown = [key for key in settings if key not in network]
    if unknown:
        name = network["_target_"].rsplit(".", 1)[-1]
        takes = ", ".join(key for key in network if not key.startswith("_"))
        raise UserError(
            f"model.net.{unknown[0]}: {name}, the network for {kind} inputs, has no such "
            f"setting; it takes {takes}"
        )


def check_from_data(model: DictConfig, shapes: dict) -> None:
    """One line for a model or its network given another shape than the data's (set by hand:
    their configs read them from the data), before the first step fails on a label the network
    has no output for or on samples of other channels or features."""
    for place, config in (("model", model), ("model.net", model.get("net") or {})):
        for key, (shape, noun) in FROM_DATA.items():
            given, found = config.get(key), shapes.get(shape)
            if given is not None and found is not None and given != found:
                reference = "${data." + shape + "}"
                raise UserError(
                    f"{place}.{key}={given}, but the data has {found} {noun}: leave it to the "
                    f"data, which the config reads as {reference}"
                )


def check_network(net: DictConfig | None, sample: Input) -> None:
    """One line, before it is built, for a network whose `takes` (dtype, dimensions) the data's
    samples are not: a CNN given table rows, an MLP given token ids. Networks that declare
    nothing (the transformer, the user's own) are not checked."""
    if not net or "_target_" not in net:
        return
    takes = getattr(target_of(net, "model.net"), "takes", None)
    if takes is None:
        return
    dtype, dimensions = takes
    if sample.dtype != dtype or dimensions not in (None, len(sample.shape)):
        raise UserError(
            f"model.net {net._target_.rsplit('.', 1)[-1]} cannot take the data's {sample.kind} "
            f"inputs ({sample.dtype}, shape {sample.shape}): leave out model/net for the network "
            f"that model.nets declares for {sample.kind} inputs, or choose one that takes them"
        )


def data_kind(data: DictConfig) -> str:
    """The input kind (`image`, `table`) of the datamodule that the data config names."""
    kind = getattr(target_of(data, "data"), "kind", None)
    if not isinstance(kind, str):
        raise UserError(
            f'{data._target_} declares no input kind: give the class `kind = "image"` or '
            '"table", or choose the network with model/net=<cnn, mlp, transformer or bag>'
        )
    return kind


def check_task(model_class: type, datamodule: pl.LightningDataModule) -> None:
    """A classifier needs class labels, a regressor numbers: one line when they differ. A
    module of the user's own declares no task (see instantiate_for_data)."""
    task, target = getattr(model_class, "task", None), datamodule.contract.target
    if task is None or task == target.task:
        return
    raise UserError(
        f"{model_class.__name__} is a {task} model, but {named(target)} is a {target.task} "
        f"target: {task_hint(datamodule)}"
    )


def named(target: Target) -> str:
    name = getattr(target, "name", None)
    return f"data {name!r}" if name else "the data's target"


def task_hint(datamodule: pl.LightningDataModule) -> str:
    """How to train on the data's target all the same: its task's hint, and where a stream
    (its class's kind; the instance's is its samples') takes data.task: from optimize.py."""
    target = datamodule.contract.target
    hint = targets.get(target.task).HINT
    words = target.task == "classification" and not all(map(is_number, target.class_names))
    if words:  # no number to predict in them: data.task=regression would refuse them
        hint = "pass model=classifier: its classes are words, not numbers to predict"
    if getattr(type(datamodule), "kind", None) == "stream":
        hint += "; a stream's data.task is optimize.py's, which writes its chunks"
    return hint


def is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


# How a model's config reads the data's class count.
READS_CLASSES = "${data.num_classes}"


def instantiate_for_data(model: DictConfig, datamodule=None) -> pl.LightningModule:
    """The model. A module of the user's own whose config reads the data's class count gets
    None for numbers to predict: one made for both tasks takes it, one made for classes fails
    in its own code (a layer of None outputs), and that is one line, not Hydra's traceback."""
    try:
        return instantiate_model(model)
    except UserError:
        raise
    except Exception:
        target = datamodule.contract.target if datamodule is not None else None
        if not target or target.task != "regression" or READS_CLASSES not in class_counts(model):
            raise
        raise UserError(
            f"{model._target_.rsplit('.', 1)[-1]} (num_classes: {READS_CLASSES}) failed to "
            f"build for {named(target)}, a regression target, which has no classes: "
            f"{task_hint(datamodule)}"
        ) from None


def class_counts(model: DictConfig) -> list:
    """The model's and its network's `num_classes`, as written (`${...}` unresolved)."""
    written = OmegaConf.to_container(model)
    net = written.get("net")
    return [written.get("num_classes"), net.get("num_classes") if isinstance(net, dict) else None]


# What a config of the user's own that names no class lacks, for the groups users add to.
NO_TARGET = {
    "data": "begin it with defaults: [table, _self_] (or images, text) to extend a shipped "
    "one, or set _target_ to a datamodule",
    "model": "begin it with defaults: [classifier, _self_] (or regressor) to extend a shipped "
    "one, or set _target_ to a LightningModule",
}


def target_of(config: DictConfig | dict, setting: str) -> Any:
    """The class that the config's `_target_` names, imported; one line when it names none (a
    config of the user's own that extends no shipped one) or it cannot be imported (a misspelt
    name, or a module of the user's own that fails to import)."""
    if "_target_" not in config:
        advice = NO_TARGET.get(setting, "set its _target_ to the class to build")
        raise UserError(f"the {setting} config names no class (no _target_): {advice}")
    try:
        return imported(config["_target_"])
    except (ImportError, AttributeError, ValueError) as error:
        raise UserError(
            f"{setting}._target_={config['_target_']} cannot be imported: {error}"
        ) from None


def check_values(config: Any, setting: str) -> None:
    """One line for a value of another type than an argument of a class of `config` (or of a
    config inside it) takes, where the class would take it and fail on it mid-run, or read a
    word as true: Hydra reads `no`, `yes`, `off` and `on` as words, and any word counts as
    true. Only arguments of plain types are checked; None, `${...}` and a value not yet set
    (`???`, which building the class reports) are left to the class."""
    if isinstance(config, DictConfig):
        config = OmegaConf.to_container(config)  # unresolved: `${...}` stays as written
    if not isinstance(config, dict):
        return
    takes = plain_arguments(config["_target_"]) if "_target_" in config else {}
    for key, value in config.items():
        written = isinstance(value, str) and ("${" in value or value == MISSING)
        if key in takes and not (value is None or written or isinstance(value, takes[key][1])):
            raise UserError(f"{setting}.{key}={value} must be {takes[key][0]}")
        check_values(value, f"{setting}.{key}")


def plain_arguments(target: str) -> dict[str, tuple[str, tuple[type, ...]]]:
    """The arguments of the class or function `target` of a plain type (PLAIN_TYPES), or None,
    its bases' included, which take what a class passes on. None for a target that cannot be
    imported (building it says so), or for a class whose annotations name what is not defined."""
    try:
        cls = imported(target)
    except (ImportError, AttributeError, ValueError):
        return {}
    found: dict[str, Any] = {}
    for each in getattr(cls, "__mro__", (cls,)):
        init = each.__dict__.get("__init__") if isinstance(each, type) else each
        try:
            hints = get_type_hints(inspect.unwrap(init)) if init else {}
        except (NameError, TypeError):
            continue
        for name, hint in hints.items():
            union = get_origin(hint) in (Union, UnionType)
            types = frozenset(get_args(hint) if union else (hint,)) - {type(None)}
            found.setdefault(name, PLAIN_TYPES.get(types))
    return {name: takes for name, takes in found.items() if takes}


def instantiate_model(config: DictConfig | dict) -> pl.LightningModule:
    # The model builds its parts itself from plain dicts, which it saves as hyperparameters.
    return instantiated(config, _recursive_=False, _convert_="all")


def instantiated(config: DictConfig | dict, **options: Any) -> Any:
    """`instantiate(config, **options)`. A target that refuses its settings raises a UserError,
    which Hydra wraps once for each level (a network in a model): one line for the user, not the
    wrapping. So is a config whose keys its class does not take (or lacks one it needs)."""
    try:
        return instantiate(config, **options)
    except InstantiationException as error:
        cause = error
        while isinstance(cause, InstantiationException) and cause.__cause__:
            cause = cause.__cause__
        if isinstance(cause, UserError):
            raise cause from None
        if isinstance(cause, TypeError) and refused_arguments(cause, config):
            watched = any(f"'{name}'" in str(cause) for name in ("monitor", "mode"))
            hint = "; a model's include monitor and mode" if watched else ""
            raise UserError(
                f"{cause}: the keys of a config are the arguments of the class it names{hint}"
            ) from None
        if cause is error:  # Hydra's own refusal of the config, as of a target it blocks
            raise UserError(hydra_refusal(error)) from None
        raise


def hydra_refusal(error: InstantiationException) -> str:
    """Hydra's message, wrapped over lines, as one, led by the key it names."""
    lines = str(error).splitlines()
    keys = [line.removeprefix("full_key: ") for line in lines if line.startswith("full_key: ")]
    text = " ".join(line.strip() for line in lines if not line.startswith("full_key: "))
    return f"{keys[0]}: {text}" if keys else text


def refused_arguments(error: TypeError, config: DictConfig | dict) -> bool:
    """Whether `error` is a class refusing a key of `config` (at any depth) as an argument, or
    lacking one it needs when Hydra calls it; not a TypeError from the class's own code, which
    keeps its traceback. A class may pass its keys on to its base, as datamodules do."""
    unexpected = re.search(r"__init__\(\) got an unexpected keyword argument '(\w+)'", str(error))
    if unexpected:
        return unexpected[1] in keys_of(config)
    last = error.__traceback__
    while last is not None and last.tb_next is not None:
        last = last.tb_next
    called_from = last.tb_frame.f_globals.get("__name__", "") if last else ""
    return called_from.startswith("hydra.") and "__init__()" in str(error)


def keys_of(config: Any) -> set[str]:
    """Every key of a config, at any depth."""
    if isinstance(config, DictConfig):
        config = OmegaConf.to_container(config)
    if not isinstance(config, dict):
        return set()
    return set(map(str, config)).union(*(keys_of(value) for value in config.values()))


def check_fits(model: torch.nn.Module, state_dict: dict, path: str | Path) -> None:
    """One line when the checkpoint's weights belong to another architecture than `model`."""
    expected = {name: tuple(value.shape) for name, value in model.state_dict().items()}
    found = {name: tuple(value.shape) for name, value in state_dict.items()}
    if expected == found:
        return
    missing, unexpected = sorted(expected.keys() - found), sorted(found.keys() - expected)
    resized = [name for name in expected.keys() & found if expected[name] != found[name]]
    what = (
        f"{resized[0]} is {found[resized[0]]} in it and {expected[resized[0]]} in the model"
        if resized
        else f"{len(missing)} weights missing, {len(unexpected)} unexpected"
        f" (e.g. {(missing or unexpected)[0]})"
    )
    raise UserError(
        f"{path} holds another architecture than the configured model: {what}; "
        "use the model config it was trained with"
    )


def build_trained(
    path: str, allowed: list[str], data: DictConfig | None = None
) -> tuple[pl.LightningModule, pl.LightningDataModule]:
    """A checkpoint's model in eval mode, and the data it was trained on (or `data`), built from
    the configs the checkpoint records once every target in them is allowed."""
    checkpoint, model_config, data_config = trained_configs(path, allowed, data)
    model = instantiate_model(model_config)
    check_fits(model, checkpoint["state_dict"], path)
    model.load_state_dict(checkpoint["state_dict"])
    contract = checkpoint["config"]["contract"]
    datamodule = instantiated(data_config, contract=contract, _convert_="all")
    return model.eval(), datamodule


def build_partial(config: dict, setting: str, **arguments):
    """`config`, a `_partial_` target such as an optimizer, called with `arguments`. What its class
    refuses (a negative learning rate, text for a number) is the user's `setting`: one line."""
    try:
        return instantiate(config)(**arguments)
    except (TypeError, ValueError) as error:
        values = ", ".join(f"{key}={value!r}" for key, value in config.items() if key[0] != "_")
        raise UserError(
            f"{setting} ({values}) is refused by {config['_target_']}: {error}"
        ) from None


def require_logger_packages(group: DictConfig | None) -> None:
    """One clear line, before anything runs, when a logger's optional package is missing."""
    entries = [group] if group and "_target_" in group else (group or {}).values()
    for entry in entries:
        extra = LOGGER_EXTRAS.get(str((entry or {}).get("_target_", "")).rsplit(".", 1)[-1])
        if not extra:
            continue
        try:
            importlib.import_module(extra)
        except ModuleNotFoundError as error:
            if error.name != extra:  # installed but broken: the original error says more
                raise
            raise UserError(
                f'logger {extra} needs the {extra} package: pip install -e ".[{extra}]"'
            ) from None


def build_callbacks(cfg: DictConfig, with_logger: bool) -> list[pl.Callback]:
    """The configured callbacks, less those that the trainer's settings leave nothing to do."""
    callbacks = instantiate_group(cfg.get("callbacks"))
    if "model" in cfg:  # training: eval and export rebuild model and data from the checkpoint
        from .callbacks import RequireWatchedMetrics  # training's alone, as the config's are

        callbacks = [RequireWatchedMetrics(), *callbacks, ConfigInCheckpoint(cfg.model, cfg.data)]
    if cfg.trainer.get("limit_val_batches") == 0 and any(
        isinstance(c, EarlyStopping) and c.monitor.startswith("val/") for c in callbacks
    ):
        raise UserError(
            "trainer.limit_val_batches=0 turns validation off, but early stopping watches a "
            "validation metric: add ~callbacks.early_stopping"
        )
    # `trainer.enable_progress_bar=false` and the like turn off the callbacks that provide it;
    # without a logger, the learning-rate monitor (which only logs) goes too.
    off = [kind for flag, kind in FEATURE_FLAGS.items() if cfg.trainer.get(flag) is False]
    if not with_logger:
        off.append(LearningRateMonitor)
    return [callback for callback in callbacks if not isinstance(callback, tuple(off))]


def device_count(accelerator) -> int | None:
    """How many devices of a trainer.accelerator this machine has: None where processes, not
    devices, are counted (the CPU) or Lightning does not know the name (it refuses it itself)."""
    if not isinstance(accelerator, str) or accelerator in ("cpu", "auto"):
        return None
    kinds = ["cuda", "mps"] if accelerator == "gpu" else [accelerator]
    if not all(kind in AcceleratorRegistry for kind in kinds):
        return None
    accelerators = [AcceleratorRegistry[kind]["accelerator"] for kind in kinds]
    return max(
        (each.auto_device_count() for each in accelerators if each.is_available()), default=0
    )


def check_trainer_settings(trainer: DictConfig) -> None:
    """One line for trainer settings that Lightning refuses unclearly ("No supported gpu backend
    found!") or accepts and then fails on deep inside fit."""
    accelerator = trainer.get("accelerator")
    count = device_count(accelerator)
    if count == 0:
        instead = "trainer=cpu"
        if trainer.get("strategy") == "ddp":
            instead = "trainer=ddp_cpu (DDP over CPU processes) or trainer=cpu"
        raise UserError(
            f"trainer.accelerator={accelerator}: this machine has no such device; train on the "
            f"CPU with {instead}"
        )
    devices = trainer.get("devices")
    # Lightning's own refusal spans two lines and names device indices, not the setting.
    if count is not None and type(devices) is int and devices > count:
        raise UserError(
            f"trainer.devices={devices}: this machine has {count} {accelerator} "
            f"device{'s' if count > 1 else ''}; set trainer.devices={count}, or -1 for all of them"
        )
    # What Lightning takes and fails on later (accumulate_grad_batches=0: a ZeroDivisionError
    # at the first step), or takes for no clipping at all (a negative gradient_clip_val).
    wholes = {"max_epochs": -1, "check_val_every_n_epoch": 1, "accumulate_grad_batches": 1}
    for name, lowest in wholes.items():
        value = trainer.get(name)
        if value is not None and (type(value) is not int or value < lowest):
            raise UserError(f"trainer.{name}={value} must be a whole number of at least {lowest}")
    clip = trainer.get("gradient_clip_val")
    if clip is not None and clip < 0:
        raise UserError(f"trainer.gradient_clip_val={clip} must be 0 or more (0: no clipping)")


def build_trainer(cfg: DictConfig) -> pl.Trainer:
    require_logger_packages(cfg.get("logger"))
    for group in ("trainer", "logger", "callbacks"):
        check_values(cfg.get(group), group)
    check_trainer_settings(cfg.trainer)
    loggers = instantiate_group(cfg.get("logger"))
    callbacks = build_callbacks(cfg, bool(loggers))
    make_trainer = instantiate(cfg.trainer, _partial_=True)
    # Unless the config sets a profiler (debug=profiler, +trainer.profiler=simple).
    unprofiled = {} if cfg.trainer.get("profiler") else {"profiler": NoProfiler()}
    try:
        trainer = make_trainer(callbacks=callbacks, logger=loggers or False, **unprofiled)
    except (MisconfigurationException, ValueError, TypeError) as error:
        # The Trainer checks its arguments as it is built: what it refuses is a trainer setting.
        raise UserError(f"Lightning refuses the trainer settings: {error}") from None
    record_sigterm_without_collectives(trainer)
    call_callbacks_that_define_each_hook()  # unless the trainer has a profiler
    if isinstance(trainer.accelerator, CPUAccelerator) and trainer.num_devices > 1:
        rank_zero_info(
            f"trainer.devices={trainer.num_devices} on the CPU: starting {trainer.num_devices} "
            "processes (DDP over gloo)"
        )
    return trainer
