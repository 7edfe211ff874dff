"""Test helpers: compose the configs users run, train once per session, call the CLI, write
the example data."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict

ROOT = Path(__file__).parents[1]
CONFIGS = ROOT / "configs"
# One torch thread per process (this one, and the CLI and DDP processes it starts): the test
# models are tiny, and threads that compete for busy cores slow every step several times over.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# CSV logging and no progress bars or summaries: quiet, fast runs with real log files.
QUIET = ["logger=csv", "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false"]
# Export tests check parity, not speed: a few timing runs suffice.
FAST_LATENCY = ["latency.warmup=1", "latency.repeats=3"]
# What eval and export may rebuild from a checkpoint, as users have it.
ALLOWED = list(OmegaConf.load(CONFIGS / "allowed_targets.yaml").allowed_targets)
# The data configs that ship with the project, tested on the example data of scripts/.
SHIPPED_DATA = ["digits", "images", "table"]


def pytest_addoption(parser):
    parser.addoption(
        "--data",
        action="append",
        default=[],
        metavar="NAME",
        help="run the datamodule tests on configs/data/NAME.yaml as it is, e.g. --data=mine "
        "(repeatable); by default they run on the shipped data configs and the example data",
    )


def pytest_generate_tests(metafunc):
    if "data_name" in metafunc.fixturenames:
        metafunc.parametrize("data_name", metafunc.config.getoption("data") or SHIPPED_DATA)


def compose_config(name: str, output_dir: Path, overrides=(), quiet: bool = True) -> DictConfig:
    """The config `python <name>.py <overrides>` would run with, writing to `output_dir`."""
    if quiet:
        overrides = [*QUIET, *overrides]
    with initialize_config_dir(str(CONFIGS), version_base="1.3"):
        cfg = compose(name, overrides=list(overrides), return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        cfg.paths.root_dir = str(ROOT)
        cfg.paths.log_dir = str(output_dir / "logs")
        cfg.paths.output_dir = str(output_dir)
        del cfg.hydra
    return cfg


def start_cli(
    script: str, *overrides: str, cwd=ROOT, env: dict | None = None, launcher=(), **popen
):
    """Starts `python [launcher] <script> <overrides>` from the project root, as a user would;
    e.g. launcher=("-m", "torch.distributed.run", "--nproc_per_node=2") for torchrun. `env` adds
    variables to this process's; None removes one."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env or {})}
    return subprocess.Popen(
        [sys.executable, *launcher, str(ROOT / script), *overrides],
        cwd=cwd,
        env={name: value for name, value in env.items() if value is not None},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


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


def error_lines(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory) -> Path:
    """A real training run with the default config, shared by tests that only read it."""
    from {{ cookiecutter.package }}.tasks.train import train

    output_dir = tmp_path_factory.mktemp("trained")
    train(compose_config("train", output_dir))
    return output_dir


@pytest.fixture(scope="session")
def exported_run(trained_run, tmp_path_factory) -> Path:
    """Every export format of the trained run's best checkpoint, shared by read-only tests."""
    from {{ cookiecutter.package }}.tasks.export import export

    output_dir = tmp_path_factory.mktemp("exported")
    best = trained_run / "checkpoints" / "best.ckpt"
    export(compose_config("export", output_dir, [f"ckpt_path={best}", *FAST_LATENCY], quiet=False))
    return output_dir


def train_briefly(tmp_path_factory, name: str, overrides: list[str]) -> Path:
    """A real training run of a few epochs, for tests of what its model exports."""
    from {{ cookiecutter.package }}.tasks.train import train

    output_dir = tmp_path_factory.mktemp(name)
    train(compose_config("train", output_dir, [*overrides, "trainer.max_epochs=3"]))
    return output_dir


@pytest.fixture(scope="session")
def mlp_run(tmp_path_factory) -> Path:
    """The MLP on the digits, trained briefly."""
    return train_briefly(tmp_path_factory, "mlp", ["model/net=mlp"])


@pytest.fixture(scope="session")
def transformer_run(tmp_path_factory) -> Path:
    """The vision transformer on the digits, trained briefly."""
    return train_briefly(tmp_path_factory, "transformer", ["model/net=transformer"])


@pytest.fixture(scope="session")
def example_data(tmp_path_factory) -> dict[str, Path]:
    """The example data, as scripts/ writes it for users: image folders and CSV tables."""
    folder = tmp_path_factory.mktemp("example_data")
    for script, name in (("example_images.py", "images"), ("example_tables.py", "tables")):
        command = [sys.executable, str(ROOT / "scripts" / script), str(folder / name)]
        subprocess.run(command, check=True, capture_output=True, timeout=300)
    return {
        "images": folder / "images",
        "breast_cancer": folder / "tables" / "breast_cancer.csv",
        "wine": folder / "tables" / "wine.csv",
        "diabetes": folder / "tables" / "diabetes.csv",
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
    """What a shipped data config needs to read the example data."""
    return {
        "digits": [],
        "images": [f"data.root={paths['images']}"],
        "table": [f"data.path={paths['breast_cancer']}", "data.target=diagnosis"],
    }[data_name]
