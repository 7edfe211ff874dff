"""A run directory keeps one run's records: a run is refused, before anything is written, a
directory that holds another task's or another config's run, or cannot be written, and takes a
directory of its own where the name is the time it started; a rerun reads what the earlier run
finished. Hydra's runs
check through the callback `launch.KeepRunRecords`, predict's plain runs (plain_run.py) directly.

No torch and no Hydra at import: predict, which runs without either, is guarded as every task is.
"""

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import yaml

from .console import cannot_write
from .files import save_text

# How configs/hydra/default.yaml names a run directory by the time it starts: a run so named
# takes a directory of its own (`own_directory`) instead of being refused one.
STAMP = "${run_stamp:"
# A sweep's config, in its folder: what Hydra's basic sweeper writes there, and launch.py for any
# sweeper. A later sweep in the same folder must be the same sweep.
SWEEP_RECORD = "multirun.yaml"
# The longest file name that most file systems take, where the system does not say.
NAME_MAX = 255
# Room that a new run directory must have: Hydra's .hydra/*.yaml and the log are a few KiB.
PROBE_BYTES = 64 * 1024


def process_rank() -> int:
    """This process's rank, from the variables that torchrun, SLURM and Lightning's DDP launcher
    set, read as Lightning reads them; 0 for a process that none of them started."""
    for key in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        if key in os.environ:
            return int(os.environ[key])
    return 0


def refusal(run_dir: Path, config: dict, output_dir: str | None) -> str | None:
    """Why a run of `config` (its task config, unresolved, without `hydra`) must not start in
    `run_dir`, if it must not; `output_dir` is `paths.output_dir`, where the task writes its
    files, when it resolves."""
    run_dir = run_dir.absolute()
    problem = name_too_long(run_dir, "hydra.run.dir")
    problem = problem or other_run(run_dir, config) or unwritable(run_dir)
    if not problem and output_dir and Path(output_dir).absolute() != run_dir:
        earlier = Path(output_dir).absolute()
        problem = other_run(earlier, config, "paths.output_dir")
        problem = problem or unwritable(earlier, setting="paths.output_dir=...")
    return problem


def keep_settings(run_dir: Path, config: dict, output_dir: str | None) -> None:
    """Hydra records a run's settings in its run directory alone. Where paths.output_dir puts the
    run's files apart from it, the record goes there too: a later run there with other settings
    is refused (`refusal`), as it is in a run directory, instead of resuming or reporting this
    run's results as its own."""
    if not output_dir or Path(output_dir).absolute() == run_dir.absolute():
        return
    record = Path(output_dir).absolute() / ".hydra" / "config.yaml"
    if not record.is_file():
        save_text(record, yaml.safe_dump(config, sort_keys=False))


def sweep_refusal(sweep_dir: Path, config: dict) -> str | None:
    """Why a sweep of `config` (its whole config, unresolved) must not start in `sweep_dir`, if
    it must not: the folder holds another sweep, or files but no sweep, or cannot be written.
    The same sweep again resumes its jobs, each in its own directory (`refusal`)."""
    sweep_dir = sweep_dir.absolute()
    problem = name_too_long(sweep_dir, "hydra.sweep.dir") or other_sweep(sweep_dir, config)
    return problem or unwritable(sweep_dir, setting="hydra.sweep.dir=...")


def other_sweep(sweep_dir: Path, config: dict) -> str | None:
    if sweep_dir.exists() and not sweep_dir.is_dir():
        return f"hydra.sweep.dir {sweep_dir} is a file, not a folder: choose another"
    if not sweep_dir.exists() or not next(sweep_dir.iterdir(), None):
        return None
    if [path.name for path in sweep_dir.iterdir()] == [SWEEP_RECORD]:  # stopped before a job
        return None
    saved = sweep_dir / SWEEP_RECORD
    if not saved.is_file():
        return (
            f"{sweep_dir} is not empty and holds no sweep (no {SWEEP_RECORD}): choose a new or "
            "empty hydra.sweep.dir"
        )
    earlier = yaml.safe_load(saved.read_text()) or {}
    changed = differences(what_sweeps(earlier), what_sweeps(config))
    if changed:
        return (
            f"{sweep_dir} holds a sweep with other settings ({changed}): rerun it with its own "
            "settings to resume it, or choose a new hydra.sweep.dir"
        )
    return None


def what_sweeps(config: dict) -> dict:
    """What makes a sweep's jobs: the task's config, the command line's overrides (the swept
    values among them) and the sweeper's settings (an Optuna search's ranges)."""
    hydra = config.get("hydra") or {}
    task = {key: value for key, value in config.items() if key != "hydra"}
    overrides = (hydra.get("overrides") or {}).get("task")
    return task | {"hydra": {"overrides": overrides, "sweeper": hydra.get("sweeper")}}


def own_directory(run_dir: Path) -> Path:
    """`run_dir`, or `<run_dir>_2`, `_3`, ... where runs that started in the same second (a loop
    of predict commands, two trainings started together) made those before: the first that
    this process makes, so that no two runs share one. `run_dir` where none can be made, for
    `refusal` to say why."""
    candidate, number = run_dir, 1
    while True:
        try:
            candidate.mkdir(parents=True)
            return candidate
        except FileExistsError:
            number += 1
            candidate = run_dir.with_name(f"{run_dir.name}_{number}")
        except OSError:
            return run_dir


def checkpoint_in(folder: Path) -> Path | None:
    """The best.ckpt of a training run's folder (or of its checkpoints/), if it holds one: what
    a user who passed the folder meant."""
    found = (folder / "checkpoints" / "best.ckpt", folder / "best.ckpt")
    return next((path for path in found if path.is_file()), None)


def other_run(run_dir: Path, config: dict, setting: str = "hydra.run.dir") -> str | None:
    """What in `run_dir` (the folder that `setting` names) a run of `config` would overwrite, if
    anything."""
    if not run_dir.exists():
        return None
    if not run_dir.is_dir():
        return f"{setting} {run_dir} is a file, not a folder: choose another {setting}"
    saved = run_dir / ".hydra" / "config.yaml"
    if not saved.is_file():
        if next(run_dir.iterdir(), None):
            return (
                f"{run_dir} is not empty and holds no run (no .hydra/config.yaml): "
                f"choose a new or empty {setting}"
            )
        return None
    if records_only(run_dir):  # its run stopped (a setting refused) before it wrote anything
        return None
    earlier = yaml.safe_load(saved.read_text()) or {}
    if earlier.get("task_name") != config.get("task_name"):
        return (
            f"{run_dir} holds a {earlier.get('task_name')} run; {config.get('task_name')} writes "
            f"to a run directory of its own: leave out {setting} or choose a new one"
        )
    changed = differences(earlier, config)
    if changed:
        return (
            f"{run_dir} holds a run with other settings ({changed}): rerun it with its own "
            f"settings to resume it, or choose a new {setting}"
        )
    return None


def records_only(run_dir: Path) -> bool:
    """Whether `run_dir` holds nothing but Hydra's records and logs: nothing that a new run would
    overwrite, and the log goes on in the same file."""
    return all(path.name == ".hydra" or path.suffix == ".log" for path in run_dir.iterdir())


def differences(earlier: dict, now: dict, most: int = 3) -> str:
    """The settings that differ, as `key was <earlier>, now <now>`: the first `most` of them."""
    before, after = dict(flatten(earlier)), dict(flatten(now))
    changed = [
        f"{key} was {before.get(key, '(unset)')}, now {after.get(key, '(unset)')}"
        for key in {**before, **after}
        if key not in before or key not in after or before[key] != after[key]
    ]
    more = f"; and {len(changed) - most} more" if len(changed) > most else ""
    return "; ".join(changed[:most]) + more


def flatten(node, prefix: str = "") -> Iterator[tuple[str, object]]:
    """(`dotted.key`, value) for every leaf of nested dicts; lists are leaves."""
    if not isinstance(node, dict) or not node:
        yield prefix, node
        return
    for key, value in node.items():
        yield from flatten(value, f"{prefix}.{key}" if prefix else str(key))


def name_too_long(path: Path, setting: str, suffix: str = "") -> str | None:
    """Why `path` cannot be made: a name in it longer than its file system allows (with
    `suffix`, which a staging folder beside it adds to its last name)."""
    try:  # the root's file system: a folder below may not exist yet, or not be reachable
        limit = os.pathconf(path.absolute().anchor, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = NAME_MAX
    names = [*path.parts[:-1], path.name + suffix]
    for name in names:
        if len(os.fsencode(name)) > limit:
            return (
                f"{setting}={path}: the name {name[:24]}... is {len(os.fsencode(name))} bytes, "
                f"longer than the {limit} the file system allows; choose a shorter one"
            )
    return None


def unwritable(run_dir: Path, **setting: str) -> str | None:
    """Why the run's files cannot be written to `run_dir`: read-only, not permitted, full. The
    probe is larger than what Hydra writes before the task runs (the task's own writes fail with
    one line too), so that a full disk never leaves Hydra's files half-written. `setting`: the
    one that moves the files, if not hydra.run.dir."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=run_dir) as probe:
            probe.write(bytes(PROBE_BYTES))
    except OSError as error:
        return cannot_write(run_dir, error, **setting)
    return None


def earlier_metrics(output_dir: Path) -> dict:
    """What a run in this directory wrote to metrics.json before; {} in a new run directory."""
    path = output_dir / "metrics.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def finished(metrics: dict, test: bool) -> bool:
    """Whether an earlier run left nothing to do: fitted, and tested if asked. A run without
    checkpoints cannot be tested again: its weights are gone."""
    tested = any(name.startswith("test/") for name in metrics)
    return bool(metrics) and (not test or tested or not metrics.get("best_model_path"))
