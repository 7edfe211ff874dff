"""DDP on two CPU processes (gloo) through the real CLI, with Lightning's launcher, torchrun and
in a Hydra multirun. Each run checks as much as it can: these are the expensive tests."""

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import pytorch_lightning as pl
from conftest import (
    ALLOWED,
    CONFIGS,
    EVERY_EPOCH,
    QUIET,
    ROOT,
    compose_config,
    error_lines,
    run_cli,
    start_cli,
    stop_at_epoch,
)
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from {{ cookiecutter.package }}.builders import build_datamodule, build_trained, build_trainer
from {{ cookiecutter.package }}.checkpoints import load_checkpoint

# The digits, split into 1,420 train samples: an even number, so the two training shards need no
# padding and must be disjoint; and 189 validation samples: odd, so padded evaluation shards
# would count one twice. RankRecorder knows a sample by its unique image.
SPLITS = ["data=digits", "data.val_fraction=0.105", "data.test_fraction=0.1046"]
TRAIN_SIZE = 1420
TORCHRUN = ("-m", "torch.distributed.run", "--nproc_per_node=2")
# The tests folder on the path, for the probes passed as extra callbacks.
PROBES = {"PYTHONPATH": f"{ROOT / 'src'}:{ROOT / 'tests'}"}


def single_process_metrics(checkpoint, stage: str, tmp_path) -> dict:
    """`stage` ("validate" or "test") of a checkpoint's weights in one process, no sampler."""
    datamodule = build_datamodule(compose_config("train", tmp_path / "single", SPLITS))
    trainer = pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False)
    model = build_trained(checkpoint, ALLOWED)[0]
    return getattr(trainer, stage)(model, datamodule=datamodule, verbose=False)[0]


@pytest.mark.slow
@pytest.mark.parametrize("launcher", [(), TORCHRUN], ids=["lightning", "torchrun"])
def test_ddp_shards_syncs_and_writes_once(launcher, tmp_path):
    logs, probe = tmp_path / "logs", tmp_path / "probe"
    result = run_cli(
        "train.py",
        *QUIET,
        *SPLITS,
        "trainer=ddp_cpu",
        "trainer.max_epochs=2",
        f"paths.log_dir={logs}",
        "+callbacks.probe._target_=probes.RankRecorder",
        f"+callbacks.probe.dirpath={probe}",
        env=PROBES,
        launcher=launcher,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads((probe / f"rank{rank}.json").read_text()) for rank in (0, 1)]

    # Every epoch the ranks see disjoint shards that together cover the train split, each
    # sample once, in an order that changes between epochs.
    for epoch in ("0", "1"):
        shards = [rank["train"][epoch] for rank in ranks]
        assert sorted(shards[0] + shards[1]) == list(range(TRAIN_SIZE))
    assert ranks[0]["train"]["0"] != ranks[0]["train"]["1"]
    # Each rank ended its process group before the interpreter's shutdown, where gloo's threads
    # can abort a finished run (exit -6).
    for rank in (0, 1):
        assert json.loads((probe / f"rank{rank}.exit.json").read_text()) is False

    # One run directory, one writer: the config printed once, one metrics.json, one set of
    # hyperparameters, and each checkpoint written once, by rank 0.
    (run_dir,) = (logs / "train" / "runs").iterdir()
    assert [path.name for path in logs.iterdir()] == ["train"]
    assert result.stdout.count("optimized_metric") == 1
    for name in ("metrics.json", "hparams.yaml", "run.json"):
        assert len(list(tmp_path.rglob(name))) == 1, name
    assert sorted(path.name for path in (run_dir / "checkpoints").iterdir()) == [
        "best.ckpt",
        "last.ckpt",
    ]
    saved = ranks[0]["saved"]
    assert ranks[1]["saved"] == [] and len(saved) == len({tuple(entry) for entry in saved})
    # last.ckpt at the end of the last epoch at least (the ranks agree on when it is due).
    assert {(1, "last.ckpt"), (0, "best.ckpt")} <= {tuple(entry) for entry in saved}

    # Validation and test metrics are the same on both ranks, are what metrics.json holds, and
    # match one process evaluating the same weights on the whole split.
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["test/acc"] > 0.5
    assert ranks[0]["val"] == ranks[1]["val"] and ranks[0]["test"] == ranks[1]["test"]
    assert ranks[0]["val"] == {name: metrics[name] for name in ranks[0]["val"]}
    assert ranks[0]["test"] == {name: metrics[name] for name in ranks[0]["test"]}
    single_val = single_process_metrics(
        run_dir / "checkpoints" / "last.ckpt", "validate", tmp_path
    )
    single_test = single_process_metrics(run_dir / "checkpoints" / "best.ckpt", "test", tmp_path)
    assert single_val["val/acc"] == metrics["val/acc"]
    assert single_test["test/acc"] == metrics["test/acc"]
    # Losses are sums of floats in a different order: equal up to rounding.
    assert single_val["val/loss"] == pytest.approx(metrics["val/loss"], rel=1e-6)
    assert single_test["test/loss"] == pytest.approx(metrics["test/loss"], rel=1e-6)


@pytest.mark.slow
def test_a_nan_loss_on_one_rank_stops_every_rank_at_that_step(tmp_path):
    # Rank 1's loss is NaN from step 8; rank 0's only from step 9, once the gradient all-reduce
    # has carried the NaN over. Both ranks must stop, at step 8, instead of one waiting forever.
    result = run_cli(
        "train.py",
        *QUIET,
        *SPLITS,
        "trainer=ddp_cpu",
        *EVERY_EPOCH,
        "trainer.max_epochs=3",
        "+trainer.limit_train_batches=6",
        "+trainer.limit_val_batches=2",
        f"hydra.run.dir={tmp_path}",
        "+callbacks.poison._target_=probes.PoisonWeights",
        "+callbacks.poison.step=8",
        "+callbacks.poison.rank=1",
        env=PROBES,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr[-3000:]
    errors = {line for line in result.stderr.splitlines() if line.startswith("error:")}
    assert errors == {
        "error: training stopped: train/loss is NaN or infinite at step 8 (epoch 1); no "
        "checkpoint holds its weights. Lower model.optimizer.lr or set trainer.gradient_clip_val"
    }, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    last = load_checkpoint(tmp_path / "checkpoints" / "last.ckpt")
    assert last["epoch"] == 0
    assert all(value.isfinite().all() for value in last["state_dict"].values())
    assert not (tmp_path / "metrics.json").exists()


@pytest.mark.slow
def test_a_split_of_fewer_samples_than_processes_is_one_line(tmp_path):
    # One validation sample for two ranks: Lightning refuses the empty loader of the second.
    result = run_cli(
        "train.py", *QUIET, "data=digits", "data.val_fraction=0.0006", "trainer=ddp_cpu",
        "trainer.max_epochs=1", f"hydra.run.dir={tmp_path}", timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr[-3000:]
    assert set(error_lines(result)) == {
        "error: a split of 1 sample to evaluate leaves some of the 2 processes none: add "
        "samples, raise data.val_fraction and data.test_fraction, or train on fewer "
        "trainer.devices"
    }
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_sigterm_to_the_launching_process_stops_every_rank_with_one_line(tmp_path):
    # Lightning's own SIGTERM handler broadcast from inside the handler, and could leave the two
    # ranks waiting for each other in different collectives: the result comes back only once
    # both processes have ended (they share its output), within the timeout.
    last = tmp_path / "checkpoints" / "last.ckpt"
    command = [*QUIET, *EVERY_EPOCH, "trainer=ddp_cpu", "trainer.max_epochs=30"]
    command.append(f"hydra.run.dir={tmp_path}")
    result = stop_at_epoch(start_cli("train.py", *command), last, 0, signal.SIGTERM)
    assert result.returncode == 128 + signal.SIGTERM, result.stderr[-3000:]
    assert set(error_lines(result)) == {
        "error: training stopped by SIGTERM; to resume, rerun the same command with "
        f"hydra.run.dir={tmp_path}"
    }
    assert "Traceback" not in result.stderr
    assert load_checkpoint(last)["epoch"] >= 0 and not (tmp_path / "metrics.json").exists()


@pytest.mark.slow
def test_multirun_with_ddp_runs_each_job_once_in_its_own_directory(tmp_path, score):
    logs, sweep = tmp_path / "logs", tmp_path / "sweep"
    result = run_cli(
        "train.py",
        "-m",
        *QUIET[:3],  # the rest removes callbacks, which callbacks=none leaves out anyway
        "trainer=ddp_cpu",
        "model.optimizer.lr=0.001,0.01",
        "callbacks=none",
        "trainer.max_epochs=1",
        "+trainer.limit_train_batches=2",
        "+trainer.limit_val_batches=1",
        "test=false",
        f"paths.log_dir={logs}",
        f"hydra.sweep.dir={sweep}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (result.stdout + result.stderr).count("Launching 2 jobs") == 1  # the sweep ran once
    assert not logs.exists()  # no rank made a run directory of its own
    for job, lr in (("0", 0.001), ("1", 0.01)):
        job_dir = sweep / job
        assert f"lr: {lr}" in (job_dir / "config.yaml").read_text()
        assert f"val/{score}" in json.loads((job_dir / "metrics.json").read_text())
        assert (job_dir / "train_ddp_process_1.log").is_file()  # rank 1 ran in the job's directory


def test_fsdp_preset_composes_for_gpus(tmp_path):
    trainer = compose_config("train", tmp_path, ["trainer=fsdp"]).trainer
    assert (trainer.accelerator, trainer.devices) == ("gpu", 4)
    strategy = instantiate(trainer.strategy)  # builds without a GPU; training needs them
    assert isinstance(strategy, pl.strategies.FSDPStrategy)


def test_slurm_launcher_config_submits_one_task_per_gpu():
    # Needs the optional plugin (the slurm extra, part of dev): pip install -e ".[slurm]".
    overrides = ["hydra/launcher=slurm", "trainer=ddp", "trainer.num_nodes=2"]
    with initialize_config_dir(str(CONFIGS), version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert (launcher.nodes, launcher.tasks_per_node, launcher.gpus_per_node) == (2, 4, 4)


def test_a_slurm_sweep_off_a_cluster_is_one_line_before_anything_is_written(tmp_path):
    """Submitit's launcher would end in a RuntimeError traceback. PATH holds Python's folder
    only: on a cluster's login node too, the test must find no srun, and submit nothing."""
    overrides = ["-m", "hydra/launcher=slurm", "seed=1,2", f"hydra.sweep.dir={tmp_path}/sweep"]
    result = run_cli("train.py", *overrides, env={"PATH": str(Path(sys.executable).parent)})
    assert result.returncode == 1
    assert error_lines(result) == [
        "error: hydra/launcher=slurm submits each job to SLURM, and this machine has no srun: "
        "start the sweep on the cluster, or leave hydra/launcher=slurm out to run the jobs here"
    ]
    assert not (tmp_path / "sweep").exists()


def test_on_slurm_the_requeue_handler_stays_beside_the_sigterm_one(tmp_path, monkeypatch):
    # What SLURMEnvironment.detect() looks for; the job is not started, only its handlers.
    for name, value in {
        "SLURM_NTASKS": "1",
        "SLURM_JOB_NAME": "train",
        "SLURM_JOB_ID": "7",
    }.items():
        monkeypatch.setenv(name, value)
    trainer = build_trainer(compose_config("train", tmp_path, ["trainer.accelerator=cpu"]))
    connector = trainer._signal_connector
    connector.register_signal_handlers()  # what every Trainer call does first
    try:
        usr1, term = (
            signal.getsignal(s).signal_handlers for s in (signal.SIGUSR1, signal.SIGTERM)
        )
    finally:
        connector.teardown()
    assert connector._slurm_sigusr_handler_fn in usr1  # checkpoint, then scontrol requeue
    assert term[0].__name__ == "notify"  # upstream.record_sigterm_without_collectives


def test_slurm_batch_script_is_valid_bash_and_keeps_one_run_dir_per_job():
    script = ROOT / "scripts" / "slurm.sbatch"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    text = script.read_text()
    assert "srun python train.py" in text and "#SBATCH --requeue" in text
    assert 'hydra.run.dir="logs/train/runs/slurm-${SLURM_JOB_ID}"' in text
