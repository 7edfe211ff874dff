"""Launching under Hydra: the run directory's records kept, torchrun's ranks, multirun jobs with
DDP, and the end of each job, by signal too.

No torch at import: the CLI registers `run_stamp` before config-only commands too.
"""

import json
import math
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, read_write

from .console import UserError, exit_with_error
from .options import OptunaSweep, validated
from .run_dir import (
    STAMP,
    SWEEP_RECORD,
    keep_settings,
    own_directory,
    process_rank,
    refusal,
    sweep_refusal,
)
from .upstream import launched_ranks, signal_that_ended

SIGNAL_NAMES = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "Ctrl-C (SIGINT)"}
# The key in torchrun's store that rank 0 sets once it has checked the run directory.
CHECKED_RUN_DIR = "run_dir_checked"
# Set for the run that `run_job_in_subprocess` starts: one job of a sweep, which Hydra runs alone.
SWEEP_JOB = "SWEEP_JOB"


def run_stamp(pattern: str) -> str:
    """The time for run directory names, like `${now:...}`, but one time for all torchrun ranks.

    torchrun starts every rank at once and each would read its own clock: across a second
    boundary they would make two run directories. The first rank to get here publishes its time
    in the store that torchrun's agent runs for its workers; the others read it from there.
    """
    stamp = datetime.now().strftime(pattern)
    store = torchrun_store()
    if store is None:
        return stamp
    return store.compare_set(f"run_stamp/{pattern}", "", stamp).decode()


def torchrun_store():
    """The key-value store that torchrun's agent runs for its workers, or None outside torchrun."""
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        return None
    from torch.distributed import TCPStore

    return TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False)


class KeepRunRecords(Callback):
    """Stops a run whose directory holds another task's or another config's run, or cannot be
    written, with one line, before Hydra writes anything there (configs/hydra/default.yaml).

    Hydra saves `.hydra/` and opens the log file as the job starts, before the task runs:
    `on_run_start` comes before that. The same config in its own directory passes, so that an
    interrupted run resumes; a directory named by the time is made here, one of the run's own
    (`run_dir.own_directory`). Only rank 0 checks: every rank of a torchrun or DDP run starts the
    same command, in the directory that rank 0 is making. torchrun starts them all at once, so
    the others wait for the check (what they write there would make the directory look taken),
    then take the directory that rank 0 chose.
    """

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        store = torchrun_store()
        if process_rank() != 0:
            if store is not None:
                store.wait([CHECKED_RUN_DIR])
                run_in(config, store.get(CHECKED_RUN_DIR).decode())
            return
        HydraConfig.instance().set_config(config)  # `hydra.run.dir` resolves as in Hydra's run_job
        for key in ("paths.root_dir", "paths.log_dir"):  # empty, runs would go to /logs, /train
            if OmegaConf.select(config, key, throw_on_resolution_failure=False) == "":
                exit_with_error(f"{key}= names no folder; pass one, or leave it out")
        task_config = OmegaConf.to_container(config)
        del task_config["hydra"]
        run_dir = Path(config.hydra.run.dir)
        if STAMP in OmegaConf.to_container(config.hydra.run)["dir"]:
            run_dir = own_directory(run_dir)
            run_in(config, str(run_dir))
        written = OmegaConf.select(config, "paths.output_dir", throw_on_resolution_failure=False)
        problem = refusal(run_dir, task_config, written)
        if problem:
            exit_with_error(problem)
        keep_settings(run_dir, task_config, written)
        if store is not None:
            store.set(CHECKED_RUN_DIR, str(run_dir))

    def on_job_start(self, config: DictConfig, **kwargs) -> None:
        """A sweep's job writes below the sweep's folder, in a directory of its own. Where
        paths.output_dir sends every job's files to one folder, each job after the first would
        find the first one's run there, and report its metric as its own: checked as a run's
        (`on_run_start`), the job with other settings is refused."""
        if HydraConfig.get().mode != RunMode.MULTIRUN or process_rank() != 0:
            return
        task_config = OmegaConf.to_container(config)
        del task_config["hydra"]
        written = OmegaConf.select(config, "paths.output_dir", throw_on_resolution_failure=False)
        job_dir = Path(config.hydra.runtime.output_dir)
        problem = refusal(job_dir, task_config, written)
        if problem:
            exit_with_error(problem)
        keep_settings(job_dir, task_config, written)

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        """A sweep's folder named by the time is its own too. Each job composes its config again
        from the command line's overrides (Hydra's `load_sweep_config`): the folder made here
        goes among them. A folder named otherwise may hold only the same sweep, which goes on
        where it stopped, as its config in the folder says (saved here for any sweeper; jobs
        that find their run finished return its metric)."""
        launcher = str(config.hydra.launcher.get("_target_", ""))
        if launcher.endswith(".SlurmLauncher") and shutil.which("srun") is None:
            exit_with_error(
                "hydra/launcher=slurm submits each job to SLURM, and this machine has no srun: "
                "start the sweep on the cluster, or leave hydra/launcher=slurm out to run the "
                "jobs here"
            )
        sweep_dir = Path(config.hydra.sweep.dir)
        if STAMP in OmegaConf.to_container(config.hydra.sweep)["dir"]:
            sweep_dir = own_directory(sweep_dir)
            with read_write(config.hydra):
                config.hydra.sweep.dir = str(sweep_dir)
                config.hydra.overrides.hydra.append(f'hydra.sweep.dir="{sweep_dir}"')
        elif problem := sweep_refusal(sweep_dir, OmegaConf.to_container(config)):
            exit_with_error(problem)
        if config.hydra.sweeper._target_.endswith(".OptunaSweeper"):
            try:
                validated(OptunaSweep, config.hydra.sweeper, prefix="hydra.sweeper.")
            except UserError as error:
                exit_with_error(str(error))
        OmegaConf.save(config, sweep_dir / SWEEP_RECORD)


def run_in(config: DictConfig, run_dir: str) -> None:
    """Makes `run_dir` the run's directory: Hydra's run_job reads it after this callback."""
    with read_write(config.hydra.run):
        config.hydra.run.dir = run_dir


def output_setting(output_dir: Path) -> str:
    """The setting that places the run's files: paths.output_dir where it puts them apart from
    the run directory, else hydra.sweep.dir for a sweep's job, or hydra.run.dir."""
    hydra = HydraConfig.get() if HydraConfig.initialized() else None
    run_dir = OmegaConf.select(hydra, "runtime.output_dir", default=None) if hydra else None
    if run_dir and Path(run_dir).absolute() != output_dir.absolute():
        return "paths.output_dir"
    return "hydra.sweep.dir" if in_sweep() else "hydra.run.dir"


def resume_hint(output_dir: Path) -> str:
    """How to resume an interrupted run: the same command, in the folder that holds it. A sweep
    started again in its folder goes on where it stopped, its finished jobs included."""
    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        where = f"hydra.sweep.dir={HydraConfig.get().sweep.dir}"
    else:
        where = f"{output_setting(output_dir)}={output_dir}"
    return f"to resume, rerun the same command with {where}"


def in_sweep() -> bool:
    """Whether this run is one job of a multirun (a sweep)."""
    if SWEEP_JOB in os.environ:
        return True
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def optimizing() -> bool:
    """Whether this run is a job of a sweep that reads what it returns: any sweeper but Hydra's
    basic one (a grid)."""
    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return False
    return not HydraConfig.get().sweeper._target_.endswith(".BasicSweeper")


def swept_value(metrics: dict, name: str) -> float | None:
    """What a run returns to a sweep: the metric `name` (`optimized_metric`), or None where it is
    not finite, which Optuna's sweeper records as a failed trial before it goes on (NaN would
    stop it). Without the metric, a job of a search is refused: every other would lack it too."""
    value = metrics.get(name)
    if value is None and optimizing():
        logged = ", ".join(sorted(key for key in metrics if key != "best_model_path"))
        raise UserError(
            f"optimized_metric={name} is not a metric of this run; choose one of {logged}"
        )
    return value if value is None or math.isfinite(value) else None


def relaunches_script(trainer) -> bool:
    """True in a multirun job whose trainer would start its other ranks by running this script.

    Lightning's DDP launcher reruns the command line with `hydra.run.dir` added. In a multirun
    that command line is the whole sweep: every rank would start all the jobs again.
    """
    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return False
    environment = getattr(trainer.strategy, "cluster_environment", None)
    return trainer.world_size > 1 and not (
        environment and environment.creates_processes_externally
    )


def run_job_in_subprocess(optimized_metric: str) -> float | None:
    """Runs the current multirun job as a single run of the same script in the job's directory,
    where Lightning's launcher starts the ranks as usual, and returns its optimized metric."""
    hydra_cfg = HydraConfig.get()
    output_dir = Path(hydra_cfg.runtime.output_dir)
    overrides = list(hydra_cfg.overrides.task)
    # hydra.mode=RUN: configs such as hparams_search set MULTIRUN. The sweep has already saved the
    # job's config in its directory, hence no output_subdir.
    command = [
        sys.executable,
        os.path.abspath(sys.argv[0]),
        *overrides,
        f'hydra.run.dir="{output_dir}"',
        "hydra.mode=RUN",
        "hydra.output_subdir=null",
    ]
    if subprocess.run(command, env=os.environ | {SWEEP_JOB: "1"}).returncode:
        raise UserError(
            f"multirun job {hydra_cfg.job.num} ({' '.join(overrides)}) failed, see above"
        )
    if not (output_dir / "metrics.json").is_file():  # it diverged, and said so: a failed trial
        return None
    return swept_value(json.loads((output_dir / "metrics.json").read_text()), optimized_metric)


class FinishWandbRun(Callback):
    """Ends the W&B run with its Hydra job (configs/logger/wandb.yaml): Lightning's WandbLogger
    reuses a W&B run still open in the process, so without this every job of a multirun would log
    into the first job's run."""

    def on_job_end(self, config, job_return: JobReturn, **kwargs) -> None:
        wandb = sys.modules.get("wandb")
        if wandb is not None and wandb.run is not None:
            wandb.finish(exit_code=0 if job_return.status == JobStatus.COMPLETED else 1)


class Stopped(UserError):
    """A run that a signal ended: it exits with 128 + the signal's number, as a shell reports a
    process killed by it, so that `train.py && export.py` goes no further."""

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.exit_status = 128 + signum


@contextmanager
def stops_by_signal(trainer, what: str, how_to_go_on: str) -> Iterator[None]:
    """Turns a Trainer call that a signal ended into `Stopped`: `<what> stopped by <signal>;
    <how_to_go_on>`. Lightning ends it with a SystemExit, after SIGTERM (schedulers, `timeout`,
    `docker stop`) without a code: exit status 0, as if the run had finished."""
    try:
        yield
    except SystemExit as error:
        signum = signal_that_ended(error)
        if signum is None:
            raise
        end_child_processes(trainer)
        message = f"{what} stopped by {SIGNAL_NAMES[signum]}; {how_to_go_on}"
        raise Stopped(signum, message) from None


def end_child_processes(trainer) -> None:
    """Kills the ranks that Lightning's DDP launcher started from this process, if any. A rank
    that got the signal a step later than this one waits in a collective that this one never
    joins, and would fail with a traceback once this process has gone."""
    children = launched_ranks(trainer)
    for child in children:
        child.kill()
        child.wait()
    # Lightning's observer thread watches this same list, and kills this process once a child in
    # it has ended with an error status: reaped, they leave it.
    children.clear()
