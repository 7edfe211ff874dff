"""Test helpers: compose the configs users run, train once per session, call the CLI, write
the example data.

The framework tests run on the data that configs/train.yaml names (the digits as shipped, or
your own): what they need to know about it (shapes, classes, samples) comes from the datamodule
through the helpers here. Tests of what only a known image dataset shows pass DIGITS.
"""

import functools
import hashlib
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from filelock import FileLock
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf, open_dict
from PIL import Image
from sklearn.datasets import load_digits

from {{ cookiecutter.package }}.console import silence_noise

ROOT = Path(__file__).parents[1]
CONFIGS = ROOT / "configs"
# One torch thread per process (this one, and the CLI and DDP processes it starts): the test
# models are tiny, and threads that compete for busy cores slow every step several times over.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# CSV logging and no progress bars or summaries: quiet, fast runs with real log files.
QUIET = ["logger=csv", "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false"]
# Run lengths the tests share: a few batches of each split per epoch, enough to learn a little;
# and one tiny epoch, for tests of the machinery rather than of learning.
FEW_BATCHES = ["+trainer.limit_train_batches=6", "+trainer.limit_val_batches=2"]
SHORT = ["trainer.max_epochs=2", *FEW_BATCHES]
# last.ckpt at the end of every epoch, for tests that stop a run once it holds a given epoch.
EVERY_EPOCH = ["callbacks.last_checkpoint.min_interval_s=0"]
TINY = [
    "trainer.max_epochs=1",
    "+trainer.limit_train_batches=3",
    "+trainer.limit_val_batches=2",
    "test=false",
]
# Small batches, for tests that count training steps: a small table (a few hundred rows) still
# has as many batches an epoch as they let it train.
SMALL_BATCHES = ["data.batch_size=8"]
# Export tests check parity, not speed: a few timing runs suffice.
FAST_LATENCY = ["latency.warmup=1", "latency.repeats=3"]
# What eval and export may rebuild from a checkpoint, as users have it.
ALLOWED = list(OmegaConf.load(CONFIGS / "allowed_targets.yaml").allowed_targets)
# The data configs that ship with the project, tested on the example data of scripts/.
SHIPPED_DATA = ["digits", "images", "table", "text"]
# For tests of what needs a known image dataset (greyscale PNG files, 8x8 request bodies): the
# example digits, whatever configs/train.yaml names.
DIGITS = ["data=digits"]
# The project's model for each task.
TASK_MODELS = {"classification": "classifier", "regression": "regressor"}


def with_model(command: str, overrides) -> list[str]:
    """The example data are classes: a training that names a shipped data config and no model
    trains the project's classifier, whatever model configs/train.yaml names for the user's data
    (a regressor, for a target of numbers). Where it names a LightningModule of the user's own,
    the machinery is tested with the project's model for the default data's task (and the
    user's module by test_own_module.py)."""
    if command not in ("train", "train.py"):
        return list(overrides)
    if any(override.startswith("model=") for override in overrides):
        return list(overrides)
    named = {override.partition("=")[2] for override in overrides if override.startswith("data=")}
    # Last: before them it would come before a flag such as -m, which Hydra then refuses.
    if named & {*SHIPPED_DATA}:
        return [*overrides, "model=classifier"]
    if named <= {"stream"} and own_default_model():  # the default data, or its chunks
        return [*overrides, f"model={TASK_MODELS[default_task()]}"]
    return list(overrides)


@functools.cache
def own_default_model() -> bool:
    """Whether configs/train.yaml names a module of the user's own: one that declares no task."""
    with initialize_config_dir(str(CONFIGS), version_base="1.3"):
        return declared_task(compose("train").model) is None


def declared_task(model: DictConfig) -> str | None:
    """The task that a model config's class declares; None for a module of the user's own."""
    return getattr(get_class(model._target_), "task", None)


@functools.cache
def default_task() -> str:
    """The default data's task, `classification` or `regression`: read once a process."""
    with tempfile.TemporaryDirectory() as folder:
        datamodule = default_datamodule(Path(folder), ["model=classifier"])
        return contract_of(datamodule)["target"]["task"]


def pytest_addoption(parser):
    parser.addoption(
        "--data",
        action="append",
        default=[],
        metavar="NAME",
        help="run the datamodule tests on configs/data/NAME.yaml as it is, e.g. --data=mine "
        "(repeatable); by default they run on the shipped data configs and the example data",
    )


def pytest_configure(config):
    """A --data name without its config is a usage error before any test runs, not a failure
    of each test that composes it."""
    known = sorted(path.stem for path in (CONFIGS / "data").glob("*.yaml"))
    for name in config.getoption("data"):
        if name not in known:
            raise pytest.UsageError(
                f"--data={name}: there is no configs/data/{name}.yaml; choose from "
                f"{', '.join(known)}, or add that file"
            )


def pytest_generate_tests(metafunc):
    if "data_name" in metafunc.fixturenames:
        metafunc.parametrize("data_name", metafunc.config.getoption("data") or SHIPPED_DATA)
    # The whole pipeline, for each data config and, on the example table, a regression too.
    if "pipeline_case" in metafunc.fixturenames:
        cases = metafunc.config.getoption("data") or [*SHIPPED_DATA, "table+regressor"]
        metafunc.parametrize("pipeline_case", cases)


def pytest_collection_modifyitems(items):
    """The slow tests first: pytest-xdist hands tests to its workers in this order, and the
    quick ones then fill the last minutes of each, not one long test running alone."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_runtest_setup(item):
    """Tasks run here as the commands run them: without the other libraries' messages that a
    user can do nothing about (upstream.NOISE). Before each test and its fixtures, those it
    shares with others too: pytest restores the warning filters after each test."""
    silence_noise()


def compose_config(name: str, output_dir: Path, overrides=(), quiet: bool = True) -> DictConfig:
    """The config `python <name>.py <overrides>` would run with, writing to `output_dir`."""
    overrides = with_model(name, [*QUIET, *overrides] if quiet else overrides)
    with initialize_config_dir(str(CONFIGS), version_base="1.3"):
        cfg = compose(name, overrides=list(overrides), return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        cfg.paths.root_dir = str(ROOT)
        cfg.paths.log_dir = str(output_dir / "logs")
        cfg.paths.output_dir = str(output_dir)
        del cfg.hydra
    return cfg


@functools.cache
def default_data() -> str:
    """The data config that configs/train.yaml names: digits as shipped, or your own."""
    with initialize_config_dir(str(CONFIGS), version_base="1.3"):
        cfg = compose("train", return_hydra_config=True)
    return cfg.hydra.runtime.choices.data


def contract_of(datamodule) -> dict:
    """The data contract a set-up datamodule declares, in its JSON form: the one place the tests
    read it from a datamodule."""
    return datamodule.contract.to_dict()


def raw_samples(datamodule, split: str, positions) -> tuple[np.ndarray | pd.DataFrame, list[str]]:
    """Samples of a split as a user holds them, before any preprocessing: raw images (N, C, H,
    W) in the contract's value range, or the rows of a table or of texts (every column but the
    target); and
    their labels as the contract names them (class names, or the target's values as text)."""
    from {{ cookiecutter.package }}.data import DigitsDataModule
    from {{ cookiecutter.package }}.data.images import ImageFiles
    from {{ cookiecutter.package }}.kinds.image import image_values, open_image
    from {{ cookiecutter.package }}.kinds.table import read_table  # tables of texts too

    contract, dataset = contract_of(datamodule), datamodule.splits[split]
    preprocessing, names = contract["preprocessing"], contract["target"].get("class_names")
    positions = list(positions)
    if isinstance(dataset, ImageFiles):
        files = [dataset.files[p] for p in positions]
        images = [open_image(file, preprocessing["channels"]) for file in files]
        size, values = preprocessing["image_size"], preprocessing["value_range"]
        raw = np.stack([image_values(image, size, values) for image in images])
        return raw, [file.parent.name for file in files]
    rows = datamodule.indices[split][positions]
    if contract["input"]["kind"] in ("table", "text"):
        table = read_table(Path(datamodule.hparams.path)).iloc[rows]
        target = datamodule.hparams.target
        return table.drop(columns=target), table[target].astype(str).tolist()
    if isinstance(datamodule, DigitsDataModule):
        digits = load_digits()
        labels = digits.target[rows]
        return digits.images[rows][:, None].astype(np.float32), (
            [names[label] for label in labels] if names else [str(label) for label in labels]
        )
    pytest.fail(f"no raw source known for {type(datamodule).__name__}: add one to raw_samples()")


def write_inputs(datamodule, folder: Path, count: int = 40, split: str = "test"):
    """The first `count` samples of a split (or all, if fewer) written for predict.py as a user
    would: a .npy file of raw images or a .csv file of table rows. The file, and the labels."""
    raw, labels = raw_samples(datamodule, split, range(min(count, len(datamodule.splits[split]))))
    folder.mkdir(parents=True, exist_ok=True)
    if isinstance(raw, pd.DataFrame):
        path = folder / "samples.csv"
        raw.to_csv(path, index=False)
    else:
        path = folder / "samples.npy"
        np.save(path, raw)
    return path, labels


def default_datamodule(output_dir: Path, overrides=()):
    """The datamodule of `python train.py <overrides>`, set up."""
    from {{ cookiecutter.package }}.builders import build_datamodule

    return build_datamodule(compose_config("train", output_dir, overrides))


def labels_of(dataset) -> np.ndarray:
    """A split's targets: held in memory, or image files' labels."""
    return np.asarray(dataset.targets if hasattr(dataset, "targets") else dataset.labels)


def majority_share(datamodule, split: str = "test") -> float:
    """The accuracy of always answering a split's most frequent class: the most a model that
    learned nothing reaches."""
    labels = labels_of(datamodule.splits[split])
    return np.bincount(labels).max() / len(labels)


# Each shipped task's score, as training logs it (`val/<score>`, `test/<score>`): how well a model
# learned, higher is better.
SCORES = {"classification": "acc", "regression": "r2"}


def score_of(datamodule) -> str:
    return SCORES[contract_of(datamodule)["target"]["task"]]


def chance(datamodule, split: str = "test") -> float:
    """The score of a model that learned nothing: the share of the split's most frequent class,
    or the R² of always answering the training split's mean (0 or below)."""
    if contract_of(datamodule)["target"]["task"] == "classification":
        return majority_share(datamodule, split)
    mean = labels_of(datamodule.splits["train"]).mean(dtype=np.float64)
    values = labels_of(datamodule.splits[split]).astype(np.float64)
    return 1 - ((values - mean) ** 2).sum() / ((values - values.mean()) ** 2).sum()


def suited_model(data_name: str, folder: Path) -> list[str]:
    """The project's model for the data's task where the default model has the other task (a
    table of numbers to predict, beside the shipped classifier); nothing where the default
    fits, or is a module of the user's own, which declares no task."""
    overrides = [f"data={data_name}"]
    task = contract_of(default_datamodule(folder, overrides))["target"]["task"]
    model_task = declared_task(compose_config("train", folder, overrides).model)
    return [] if model_task in (None, task) else [f"model={TASK_MODELS[task]}"]


@pytest.fixture(scope="session")
def task() -> str:
    """The default data's task: `classification` or `regression`."""
    return default_task()


@pytest.fixture(scope="session")
def watched(tmp_path_factory) -> tuple[str, str]:
    """The default model's monitored metric, and which way is better (`min` or `max`)."""
    model = compose_config("train", tmp_path_factory.mktemp("watched")).model
    return model.monitor, model.mode


@pytest.fixture(scope="session")
def score(task) -> str:
    """The score of the default data's task: `acc` for classes, `r2` for numbers."""
    return SCORES[task]


def read_checkpoint(path: Path) -> dict:
    """A checkpoint's tensors and settings (weights only), on the CPU: a run on a GPU saves its
    tensors on the GPU."""
    return torch.load(path, map_location="cpu", weights_only=True)


def trained_data(run: Path):
    """The model of a training run's best checkpoint, in eval mode, and its data, set up as the
    run prepared it."""
    from {{ cookiecutter.package }}.builders import build_trained

    model, datamodule = build_trained(str(run / "checkpoints" / "best.ckpt"), ALLOWED)
    datamodule.setup()
    return model, datamodule


def eager_answers(model, datamodule, count: int, split: str = "test") -> list:
    """What the trained model itself (torch, eager) answers for the first `count` samples of a
    split, as its task decodes them (class names, or values): what predict and serve must
    answer for the same raw inputs."""
    from {{ cookiecutter.package }} import targets

    outputs = []
    with torch.inference_mode():
        for inputs, _ in datamodule.loader(split, as_evaluated=True):
            outputs.append(model(inputs).numpy())
            if sum(map(len, outputs)) >= count:
                break
    target = datamodule.contract.target
    decoded = targets.get(target.task).decode(np.concatenate(outputs)[:count], target)
    return [answer(prediction) for prediction in decoded]


def answer(prediction: dict) -> str | float:
    """A prediction's class, or its value."""
    return prediction["class"] if "class" in prediction else prediction["value"]


def answers_agree(predictions: list[dict], answers: list) -> bool:
    """Predictions give the classes of `answers`, or their values up to float32 rounding."""
    given = [answer(prediction) for prediction in predictions]
    return len(given) == len(answers) and all(
        mine == theirs if isinstance(theirs, str) else mine == pytest.approx(theirs, rel=1e-4)
        for mine, theirs in zip(given, answers, strict=True)
    )


def start_cli(
    script: str,
    *overrides: str,
    root=ROOT,
    cwd=None,
    env: dict | None = None,
    launcher=(),
    **popen,
):
    """Starts `python [launcher] <script> <overrides>` from the project `root`, as a user would;
    e.g. launcher=("-m", "torch.distributed.run", "--nproc_per_node=2") for torchrun. `env` adds
    variables to this process's; None removes one."""
    env = {**os.environ, "PYTHONPATH": str(root / "src"), **(env or {})}
    return subprocess.Popen(
        [sys.executable, *launcher, str(root / script), *with_model(script, overrides)],
        cwd=cwd or root,
        env={name: value for name, value in env.items() if value is not None},
        text=True,
        **{"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **popen},
    )


def copy_project(folder: Path) -> Path:
    """A copy of the project's code, configs and scripts, to add the user's files to."""
    for name in ("src", "configs", "scripts", "train.py", "eval.py", "export.py", "predict.py"):
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, folder / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, folder / name)
    shutil.copy(ROOT / "serve.py", folder / "serve.py")
    return folder


def unchanged_but(copy: Path, added: list[str]) -> bool:
    """Whether `copy` holds the project's own files exactly as the project has them, and
    `added` besides (caches aside): the user's files needed no change anywhere else."""

    def digest(path: Path) -> str | None:
        return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None

    names = [
        str(path.relative_to(copy))
        for path in copy.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    ]
    extra = [name for name in names if digest(ROOT / name) is None]
    changed = [
        name for name in names if name not in extra and digest(copy / name) != digest(ROOT / name)
    ]
    return sorted(extra) == sorted(added) and not changed


def without_torch(folder: Path) -> dict[str, str]:
    """The environment for `start_cli` of a process in which torch and Lightning cannot be
    imported: packages of theirs that fail to import come first on the path."""
    for name in ("torch", "pytorch_lightning", "lightning"):
        (folder / name).mkdir(parents=True)
        (folder / name / "__init__.py").write_text(
            f"raise ImportError('{name} is blocked in this test')\n"
        )
    return {"PYTHONPATH": os.pathsep.join([str(folder), str(ROOT / "src")])}


def finish(process: subprocess.Popen, timeout=300) -> subprocess.CompletedProcess:
    """The result of a started command, once it and every process that shares its output (DDP
    ranks) have ended."""
    with process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def run_code(code: str, timeout=120) -> subprocess.CompletedProcess:
    """Runs `python -c <code>` in a fresh process with the project's package importable: for
    what a process imports, which this one has long since done."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    command = [sys.executable, "-c", code]
    return subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def run_entry_point(function: str, *overrides: str) -> subprocess.CompletedProcess:
    """Runs cli.py's `function` with `overrides` in a fresh process as its script does, and
    prints as the last line of stdout which of torch and Lightning it imported: for commands
    that must end before they need them."""
    code = (
        "import sys\n"
        f"sys.argv = [{function!r}, *{list(overrides)!r}]\n"
        f"from {{ cookiecutter.package }}.cli import {function}\n"
        "try:\n"
        f"    {function}()\n"
        "finally:\n"
        "    print(sorted({'torch', 'pytorch_lightning'} & set(sys.modules)))\n"
    )
    return run_code(code)


def run_cli(script: str, *overrides: str, timeout=300, **options) -> subprocess.CompletedProcess:
    """Runs a command as `start_cli` starts it, and returns its result."""
    return finish(start_cli(script, *overrides, **options), timeout)


def stop_at_epoch(process: subprocess.Popen, last: Path, epoch: int, signum: int):
    """Sends `signum` to a training command once its last.ckpt holds `epoch`; its result."""
    from {{ cookiecutter.package }}.checkpoints import load_checkpoint

    # last.ckpt is replaced atomically, so it can be read while the run goes on.
    while process.poll() is None and not (
        last.is_file() and load_checkpoint(last)["epoch"] >= epoch
    ):
        time.sleep(0.05)
    process.send_signal(signum)
    return finish(process, timeout=120)


def run_predict(model, input, output_dir: Path, *overrides: str) -> list[dict]:
    """The entries of predictions.json that `python predict.py model=<model> input=<input>`
    writes."""
    from {{ cookiecutter.package }}.tasks.predict import predict

    overrides = [f"model_path={model}", f"input={input}", *overrides]
    predict(compose_config("predict", output_dir, overrides, quiet=False))
    return json.loads((output_dir / "predictions.json").read_text())["predictions"]


def save_pngs(images: np.ndarray, folder: Path) -> list[Path]:
    """Raw digits (0..16) as greyscale PNG files as a user would save them: 0..255, and larger
    than the model's 8x8."""
    folder.mkdir(parents=True, exist_ok=True)
    files = [folder / f"{index:02}.png" for index in range(len(images))]
    for image, file in zip(images, files, strict=True):
        pixels = np.round(image * 255 / 16).astype(np.uint8)
        Image.fromarray(pixels).resize((32, 32), Image.Resampling.NEAREST).save(file)
    return files


def png_claiming(width: int, height: int) -> bytes:
    """A tiny PNG whose header claims `width` x `height` pixels: Pillow reads the size first."""
    buffer = io.BytesIO()
    Image.new("L", (1, 1)).save(buffer, "PNG")
    data = bytearray(buffer.getvalue())
    header = b"IHDR" + width.to_bytes(4, "big") + height.to_bytes(4, "big") + data[24:29]
    data[12:29] = header
    data[29:33] = zlib.crc32(header).to_bytes(4, "big")
    return bytes(data)


def kept_in_log(log: Path, level: str = "INFO") -> list[str]:
    """The lines a command printed that its run's log file (Hydra's `<task>.log`) keeps as well,
    without the log's `[time][name][level] - ` prefix."""
    prefix = f"][{{ cookiecutter.package }}][{level}] - "
    return [line.split(prefix, 1)[1] for line in log.read_text().splitlines() if prefix in line]


def error_lines(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def made_once(tmp_path_factory, name: str, make: Callable[[Path], object]) -> Path:
    """The folder `name`, which `make(folder)` fills once a test session: pytest-xdist's
    workers share it, as each would otherwise train the same model again."""
    base = tmp_path_factory.getbasetemp()
    if "PYTEST_XDIST_WORKER" in os.environ:
        base = base.parent  # the session's folder, that holds each worker's
    folder = base / name
    with FileLock(f"{folder}.lock"):
        if not (base / f"{name}.done").exists():
            shutil.rmtree(folder, ignore_errors=True)  # what a worker that failed left
            folder.mkdir()
            make(folder)
            (base / f"{name}.done").touch()
    return folder


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory) -> Path:
    """A real training run with the default config, shared by tests that only read it."""
    from {{ cookiecutter.package }}.tasks.train import train

    return made_once(tmp_path_factory, "trained", lambda run: train(compose_config("train", run)))


def export_run(run: Path, output_dir: Path) -> Path:
    """Every export format of a training run's best checkpoint."""
    from {{ cookiecutter.package }}.tasks.export import export

    best = run / "checkpoints" / "best.ckpt"
    export(compose_config("export", output_dir, [f"ckpt_path={best}", *FAST_LATENCY], quiet=False))
    return output_dir


@pytest.fixture(scope="session")
def exported_run(trained_run, tmp_path_factory) -> Path:
    """Every export format of the trained run's best checkpoint, shared by read-only tests."""
    return made_once(tmp_path_factory, "exported", functools.partial(export_run, trained_run))


@pytest.fixture(scope="session")
def digits_run(request, tmp_path_factory) -> Path:
    """The default model trained on the digits: the trained run itself where they are the
    default data."""
    if default_data() == "digits":
        return request.getfixturevalue("trained_run")
    return train_briefly(tmp_path_factory, "digits", DIGITS, epochs=None)


@pytest.fixture(scope="session")
def digits_export(request, digits_run, tmp_path_factory) -> Path:
    """Every export format of `digits_run`."""
    if default_data() == "digits":
        return request.getfixturevalue("exported_run")
    export = functools.partial(export_run, digits_run)
    return made_once(tmp_path_factory, "digits_exported", export)


def optimized(folder: Path, output_dir: str) -> str:
    """The data that configs/train.yaml names, written by optimize.py to `output_dir`."""
    from {{ cookiecutter.package }}.tasks.optimize import optimize

    overrides = [f"data={default_data()}", f"output_dir={output_dir}"]
    optimize(compose_config("optimize", folder, overrides, quiet=False))
    return output_dir


@pytest.fixture(scope="session")
def stream(tmp_path_factory) -> Path:
    """The default data, optimized once into a local folder, for data=stream."""
    folder = made_once(tmp_path_factory, "stream", lambda f: optimized(f, str(f / "chunks")))
    return folder / "chunks"


def train_briefly(tmp_path_factory, name: str, overrides: list[str], epochs=3) -> Path:
    """A real training run of a few epochs (None: as configured), for tests of what its model
    exports."""
    from {{ cookiecutter.package }}.tasks.train import train

    overrides = [*overrides, *([f"trainer.max_epochs={epochs}"] if epochs else [])]
    return made_once(
        tmp_path_factory, name, lambda run: train(compose_config("train", run, overrides))
    )


# Each shipped network on the digits: the CNN needs images, and these runs show how export
# quantizes and fuses each network on the same known images.
@pytest.fixture(scope="session")
def mlp_run(tmp_path_factory) -> Path:
    """The MLP on the digits, trained briefly."""
    return train_briefly(tmp_path_factory, "mlp", [*DIGITS, "model/net=mlp"])


@pytest.fixture(scope="session")
def transformer_run(tmp_path_factory) -> Path:
    """The vision transformer on the digits, trained briefly."""
    return train_briefly(tmp_path_factory, "transformer", [*DIGITS, "model/net=transformer"])


# Two topics, each with words of its own: a corpus a model learns in a few steps.
WORDS = {
    "sky": ["star", "moon", "planet", "orbit", "comet", "rocket", "galaxy", "telescope"],
    "kitchen": ["bread", "butter", "oven", "flour", "recipe", "soup", "pepper", "spoon"],
}


def sentences(count: int, seed: int = 0) -> list[tuple[str, str]]:
    generator = random.Random(seed)
    topics = sorted(WORDS)
    return [
        (" ".join(generator.choices(WORDS[topic], k=8)).capitalize() + ".", topic)
        for topic in (topics[index % 2] for index in range(count))
    ]


def write_texts(root: Path, count: int = 80) -> Path:
    for index, (sentence, topic) in enumerate(sentences(count)):
        (root / topic).mkdir(parents=True, exist_ok=True)
        (root / topic / f"{index:03d}.txt").write_text(sentence + "\n")
    return root


@pytest.fixture(scope="session")
def text_export(tmp_path_factory) -> Path:
    """A classifier of a folder of texts per class, briefly trained and exported as ONNX."""
    from {{ cookiecutter.package }}.tasks.export import export
    from {{ cookiecutter.package }}.tasks.train import train

    def train_and_export(folder: Path) -> None:
        data = ["data=text", f"data.root={write_texts(folder / 'texts')}", "data.max_length=16"]
        settings = ["data.batch_size=16", "trainer.max_epochs=15"]  # 60 steps: it learns
        train(compose_config("train", folder / "run", [*data, *settings]))
        best = folder / "run" / "checkpoints" / "best.ckpt"
        overrides = [f"ckpt_path={best}", "formats=[onnx]", *FAST_LATENCY]
        export(compose_config("export", folder / "export", overrides, quiet=False))

    return made_once(tmp_path_factory, "text_export", train_and_export) / "export"


@pytest.fixture(scope="session")
def example_data(tmp_path_factory) -> dict[str, Path]:
    """The example data, as scripts/ writes it for users: image folders, CSV tables, texts."""

    def write(folder: Path) -> None:
        for script, name in (
            ("example_images.py", "images"),
            ("example_tables.py", "tables"),
            ("example_texts.py", "texts"),
        ):
            command = [sys.executable, str(ROOT / "scripts" / script), str(folder / name)]
            subprocess.run(command, check=True, capture_output=True, timeout=300)

    folder = made_once(tmp_path_factory, "example_data", write)
    return {
        "images": folder / "images",
        "breast_cancer": folder / "tables" / "breast_cancer.csv",
        "wine": folder / "tables" / "wine.csv",
        "diabetes": folder / "tables" / "diabetes.csv",
        "quotes": folder / "texts" / "quotes.csv",
    }


@pytest.fixture
def data_overrides(request, data_name) -> list[str]:
    """`data=<name>`, pointed at the example data for a shipped config; a config given with
    --data is used as it is."""
    if request.config.getoption("data"):
        return [f"data={data_name}"]
    paths = request.getfixturevalue("example_data")
    return [f"data={data_name}", *example_overrides(data_name, paths)]


def example_overrides(data_name: str, paths: dict[str, Path]) -> list[str]:
    """What a shipped data config (or data+model case) needs to read the example data."""
    return {
        "digits": [],
        "images": [f"data.root={paths['images']}"],
        "table": [f"data.path={paths['breast_cancer']}", "data.target=diagnosis"],
        "text": [f"data.path={paths['quotes']}", "data.text=quote", "data.target=topic"],
        "table+regressor": [
            f"data.path={paths['diabetes']}",
            "data.target=progression",
            "model=regressor",
        ],
    }[data_name]
