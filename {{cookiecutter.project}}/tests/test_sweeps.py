"""Multiruns through the CLI, as users start them: an Optuna search and a plain grid."""

import json
import signal
from datetime import datetime, timedelta

import optuna
import pytest
import yaml
from conftest import EVERY_EPOCH, QUIET, TINY, error_lines, run_cli, start_cli, stop_at_epoch

# One tiny epoch per job, quiet: these tests are about the sweep machinery, not about learning.
JOB = [*QUIET[1:], *TINY]
SECRET = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.slow
def test_optuna_sweep_runs_every_trial_and_reports_the_best(tmp_path, watched):
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"  # as several machines would share a study
    result = run_cli(
        "train.py",
        "hparams_search=optuna",
        "hydra.sweeper.n_trials=3",
        f"hydra.sweeper.storage={storage}",
        "logger=csv",
        *JOB,
        f"hydra.sweep.dir={tmp_path}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    trials = sorted(path for path in tmp_path.iterdir() if path.is_dir())
    assert [trial.name for trial in trials] == ["0", "1", "2"]
    monitor, mode = watched  # the default model's, which the search optimizes
    scores = {
        trial.name: json.loads((trial / "metrics.json").read_text())[f"{monitor}_best"]
        for trial in trials
    }
    best = yaml.safe_load((tmp_path / "optimization_results.yaml").read_text())
    better = min if mode == "min" else max
    assert best["best_value"] == better(scores.values())
    # The reported parameters are those the best trial ran with.
    best_trial = tmp_path / better(scores, key=scores.get)
    overrides = yaml.safe_load((best_trial / ".hydra" / "overrides.yaml").read_text())
    searched = dict(override.split("=", 1) for override in overrides if "=" in override)
    assert set(best["best_params"]) == {
        "model.optimizer.lr",
        "data.batch_size",
        "++model.net.dropout",
    }
    for name, value in best["best_params"].items():
        assert float(searched[name]) == pytest.approx(value)
    (study,) = optuna.get_all_study_summaries(storage)
    assert study.n_trials == 3 and study.best_trial.value == best["best_value"]


@pytest.mark.slow  # train.py processes
@pytest.mark.parametrize(
    ("setting", "line"),
    [
        (
            "model.mode=up",
            "error: hydra.sweeper.direction=upimize must be minimize or maximize; "
            "hparams_search=optuna reads it off model.mode, min or max",
        ),
        ("hydra.sweeper.n_jobs=0", "error: hydra.sweeper.n_jobs=0 must be a whole number of at"),
        ("hydra.sweeper.storage=nope://x", "error: hydra.sweeper.storage=nope://x must be a "),
        ("hydra.sweeper.storage=sqlite:////no/such/folder/a.db", "error: hydra.sweeper.storage="),
    ],
)
def test_sweeper_settings_optuna_fails_on_are_one_line_before_a_trial(setting, line, tmp_path):
    result = run_cli(
        "train.py", "hparams_search=optuna", setting, *JOB, f"hydra.sweep.dir={tmp_path}"
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    (error,) = error_lines(result)
    assert error.startswith(line)
    assert list(tmp_path.iterdir()) == []  # no trial, no record of a sweep


@pytest.mark.slow
def test_a_sweep_goes_on_past_a_diverged_trial_and_ends_in_one_line_if_none_finished(tmp_path):
    # An infinite learning rate makes every trial's loss NaN at its first update.
    result = run_cli(
        "train.py",
        "hparams_search=optuna",
        "hydra.sweeper.n_trials=2",
        "model.optimizer.lr=inf",
        *JOB,
        f"hydra.sweep.dir={tmp_path}",
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.stdout.count("NaN or infinite") == 2  # the first trial did not end the sweep
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == (
        "error: the sweep has no trial to report: each one failed (see its line above), or "
        "hydra.sweeper.n_trials was below 1"
    )
    assert sorted(path.name for path in tmp_path.iterdir() if path.is_dir()) == ["0", "1"]


@pytest.mark.slow
def test_a_search_optimizing_a_metric_no_run_logs_is_refused_in_one_line(tmp_path, watched):
    search = ["hparams_search=optuna", "hydra.sweeper.n_trials=2", f"hydra.sweep.dir={tmp_path}"]
    result = run_cli("train.py", *search, "optimized_metric=val/nothing", *JOB)
    assert result.returncode == 1
    line = result.stderr.splitlines()[-1]
    assert line.startswith("error: optimized_metric=val/nothing is not a metric of this run;")
    assert watched[0] in line  # the choices
    # A grid reads nothing back: its jobs run all the same.
    grid = ["-m", f"hydra.sweep.dir={tmp_path / 'grid'}"]
    result = run_cli("train.py", *grid, "optimized_metric=val/nothing", *JOB)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.slow
def test_a_sweep_folder_takes_the_same_sweep_again_and_refuses_another(tmp_path, watched):
    def sweep(*learning_rates: str):
        grid = ["-m", f"model.optimizer.lr={','.join(learning_rates)}", *JOB]
        return run_cli("train.py", *grid, f"hydra.sweep.dir={tmp_path}")

    assert sweep("0.001", "0.01").returncode == 0
    again = sweep("0.001", "0.01")  # as after an interruption: each finished job says so
    assert again.returncode == 0
    assert again.stdout.count(f" is complete ({watched[0]}_best=") == 2
    assert again.stdout.count("to train again, choose a new hydra.sweep.dir") == 2
    records = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    other = sweep("0.1", "0.01")  # job 0 would find the finished run of another rate
    assert other.returncode == 1
    (line,) = error_lines(other)
    assert line.startswith(f"error: {tmp_path} holds a sweep with other settings (")
    assert line.endswith("or choose a new hydra.sweep.dir") and "0.1" in line
    assert {path: path.read_bytes() for path in records} == records


@pytest.mark.slow
def test_jobs_that_share_paths_output_dir_are_refused_after_the_first(tmp_path, watched):
    shared = ["-m", "model.optimizer.lr=0.001,0.01", f"paths.output_dir={tmp_path / 'files'}"]
    typo = ["-m", "model.optimizer.lrr=0.001,0.01"]
    (tmp_path / "notes").write_text("mine")
    into_a_file = run_cli("train.py", *shared, *JOB, f"hydra.sweep.dir={tmp_path / 'notes'}")
    assert error_lines(into_a_file) == [
        f"error: hydra.sweep.dir {tmp_path / 'notes'} is a file, not a folder: choose another"
    ]
    # A sweep refused before its first job leaves its folder to the corrected command.
    assert run_cli("train.py", *typo, *JOB, f"hydra.sweep.dir={tmp_path / 'sweep'}").returncode
    result = run_cli("train.py", *shared, *JOB, f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert result.returncode == 1
    assert error_lines(result) == [
        f"error: {tmp_path / 'files'} holds a run with other settings (model.optimizer.lr was "
        "0.001, now 0.01): rerun it with its own settings to resume it, or choose a new "
        "paths.output_dir"
    ]
    assert f"{watched[0]}_best" in json.loads((tmp_path / "files" / "metrics.json").read_text())


@pytest.mark.slow
def test_grid_jobs_get_own_dirs_and_wandb_runs_and_dotenv_secrets_stay_out(tmp_path):
    # .env puts W&B offline: that the runs come out offline shows the file was read.
    (tmp_path / ".env").write_text(f"WANDB_MODE=offline\nWANDB_API_KEY={SECRET}\n")
    # Earlier sweeps hold the names of the next two minutes, as if started in the same seconds.
    sweeps, now = tmp_path / "logs" / "train" / "multiruns", datetime.now()
    held = [
        sweeps / (now + timedelta(seconds=s)).strftime("%Y-%m-%d_%H-%M-%S") for s in range(-1, 120)
    ]
    for folder in held:
        folder.mkdir(parents=True)
        (folder / "multirun.yaml").write_text("earlier\n")
    result = run_cli(
        "train.py",
        "-m",
        "model.optimizer.lr=0.001,0.01",
        "logger=[csv,wandb]",
        *JOB,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (sweep,) = set(sweeps.iterdir()) - set(held)  # the next free name, `<time>_2`
    assert sweep.name.startswith(tuple(folder.name + "_" for folder in held))
    assert all([path.name for path in folder.iterdir()] == ["multirun.yaml"] for folder in held)
    jobs = sorted(path for path in sweep.iterdir() if path.is_dir())
    assert [job.name for job in jobs] == ["0", "1"]
    learning_rates = [
        yaml.safe_load((job / "config.yaml").read_text())["model"]["optimizer"]["lr"]
        for job in jobs
    ]
    assert learning_rates == [0.001, 0.01]
    wandb_runs = [list(job.glob("wandb/offline-run-*")) for job in jobs]
    assert all(len(runs) == 1 for runs in wandb_runs)  # each job its own run, in its own dir
    assert wandb_runs[0][0].name != wandb_runs[1][0].name
    assert all((job / "metrics.json").is_file() for job in jobs)

    written = [path for path in tmp_path.rglob("*") if path.is_file() and path.name != ".env"]
    assert not [path for path in written if SECRET.encode() in path.read_bytes()]
    assert SECRET not in result.stdout + result.stderr


@pytest.mark.slow
def test_a_sweep_stopped_mid_job_names_its_folder_and_the_command_finishes_it(tmp_path):
    """Rerun in its own run directory, one job would train alone: the sweep's folder it is."""
    grid = ["-m", "seed=1,2", *QUIET[1:], *EVERY_EPOCH, "trainer.max_epochs=30", "test=false"]
    grid += ["+trainer.limit_train_batches=3", "+trainer.limit_val_batches=1"]
    grid += ["callbacks.early_stopping.patience=30", f"hydra.sweep.dir={tmp_path}"]
    last = tmp_path / "0" / "checkpoints" / "last.ckpt"
    stopped = stop_at_epoch(start_cli("train.py", *grid), last, 1, signal.SIGINT)
    assert stopped.returncode == 130
    assert error_lines(stopped) == [
        "error: training stopped by Ctrl-C (SIGINT); to resume, rerun the same command with "
        f"hydra.sweep.dir={tmp_path}"
    ]
    assert not (tmp_path / "0" / "metrics.json").exists()
    finished = run_cli("train.py", *grid)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert all((tmp_path / job / "metrics.json").is_file() for job in ("0", "1"))
