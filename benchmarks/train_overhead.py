"""Seconds per training epoch: the generated project against a hand-written PyTorch loop.

    python benchmarks/train_overhead.py [--pairs 7] [--epochs 10] [--breakdown | --goal]
                                        [--project DIR]

Each round runs every variant once, in a fresh process, in rotating order, so that a busy
machine slows all of them alike. An epoch is one pass over the training split plus one
validation pass and every epoch-end hook. A run's steady-state time is the mean of its epochs
without the first (warm-up) and the last (it ends with the one-off pictures drawn when training
ends): the mean, not the median, so that work done every few epochs counts in full. Ratios are
taken within each round, to the hand-written loop and to Lightning's loop alone, then the median
over rounds is reported, with the minor page faults per epoch (see --default-malloc in common.py).

"Lightning's loop alone" trains the project's model on its data with no callback, logger or
checkpoint: the floor that no change inside the project can go below.

--goal runs only the project, Lightning's loop alone and the hand-written loop, for the goal's
ratio (issue 24: at most 1.05x Lightning's loop alone), and runs them in turns: the three
processes of a round start together and take turns, one epoch each (probes.Turns). The speed of
this machine changes from second to second, and runs one after the other met different moments
of it: their ratios spread by +-10 % from round to round, in turns by +-4 %. A run in turns
waits two epochs' time for each of its own, so work done every so many seconds (last.ckpt, the
pictures) comes three times as often per epoch; in 10 epochs, none of it comes, as in a run
alone. --one-at-a-time runs them one after the other, as every other variant is.

--breakdown adds the project with each default callback (and the logger) removed in turn: the
difference to the full project is what that piece costs per epoch; and Lightning's loop alone with
manual optimization (no closure, fewer hooks per step).
"""

import argparse
import json
import socket
import subprocess
import tempfile
from pathlib import Path

from common import (
    PROJECT,
    add_arguments,
    baseline,
    median,
    probed_training,
    project_env,
    report,
    run_baseline,
    setup,
    steady_epoch,
    train_with_probe,
)

LOOP = "Lightning's loop alone"


def default_callbacks(project: Path) -> list[str]:
    """The names of the callbacks that the project's default train config adds."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(str(project / "configs"), version_base="1.3"):
        return list(compose("train").callbacks)


def variants(project: Path, breakdown: bool, goal: bool) -> dict[str, list[str] | str]:
    """Name -> overrides of `python train.py`, or the name of a baseline in baselines.py."""
    runs: dict[str, list[str] | str] = {
        "project": PROJECT,
        "hand-written loop": "handwritten",
        LOOP: "lightning_loop",
    }
    if goal:
        return runs
    runs |= {
        "plain Lightning": "plain_lightning",
        "project, model.compile=true": [*PROJECT, "model.compile=true"],
        # As the project saved last.ckpt before it was written by time: at every epoch's end.
        "project, last.ckpt every epoch": [*PROJECT, "callbacks.last_checkpoint.min_interval_s=0"],
    }
    if breakdown:
        callbacks = [name for name in default_callbacks(project) if name != "rich_progress_bar"]
        runs |= {f"project without {name}": [*PROJECT, f"~callbacks.{name}"] for name in callbacks}
        # LearningRateMonitor refuses to run without a logger.
        runs["project without logger and lr_monitor"] = [
            *PROJECT,
            "~logger",
            "~callbacks.lr_monitor",
        ]
        runs["project with its progress bar"] = []
        runs["Lightning's loop alone, manual optimization"] = "lightning_manual"
    return runs


def train_once(project: Path, how: list[str] | str, epochs: int, scratch: Path) -> dict:
    """One training run in its own process; returns its timestamps (probes.Clock)."""
    scratch = Path(tempfile.mkdtemp(dir=scratch))  # a new run directory: nothing to auto-resume
    times = scratch / "times.json"
    if isinstance(how, str):
        run_baseline(project, how, str(epochs), str(times), str(scratch / "run"))
        return json.loads(times.read_text())
    return train_with_probe(project, how, epochs, scratch / "run", "EpochTimer", times)


def in_turns(project: Path, runs: dict[str, list[str] | str], epochs: int, scratch: Path) -> dict:
    """Every run of a round at once, one epoch at a time in turn (probes.Turns); returns each
    run's timestamps."""
    scratch = Path(tempfile.mkdtemp(dir=scratch))
    address, started = str(scratch / "turns"), {}
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(address)
        server.listen(len(runs))
        server.settimeout(1.0)
        try:
            for index, (name, how) in enumerate(runs.items()):
                started[name] = start(project, how, epochs, scratch / str(index), address)
            give_turns(server, started)
        finally:
            for process, _ in started.values():
                process.kill()  # one that failed leaves the others waiting for a turn
    return {
        name: json.loads((run / "times.json").read_text()) for name, (_, run) in started.items()
    }


def start(project: Path, how: list[str] | str, epochs: int, run: Path, address: str):
    """A run of `train_once`, started in the background in the folder `run`."""
    run.mkdir()
    times = run / "times.json"
    if isinstance(how, str):
        command = baseline(how, str(epochs), str(times), str(run / "run"))
    else:
        command = probed_training(how, epochs, run / "run", "EpochTimer", times)
    env = project_env(project, BENCH_TURNS=address)
    with (run / "output.log").open("w") as output:
        process = subprocess.Popen(command, cwd=project, env=env, stdout=output, stderr=output)
    return process, run


def give_turns(server: socket.socket, started: dict) -> None:
    """Waits until every run has connected, then gives them the turn in order until all have
    ended; raises with the output of a run that fails."""
    waiting = []
    while len(waiting) < len(started):
        try:
            waiting.append(server.accept()[0])
        except TimeoutError:
            for process, run in started.values():
                if process.poll() is not None:
                    failed(process, run)
    while waiting:
        for turn in list(waiting):
            turn.sendall(b"g")
            if turn.recv(1) != b"d":  # the run has ended
                turn.close()
                waiting.remove(turn)
    for process, run in started.values():
        if process.wait() != 0:
            failed(process, run)


def failed(process: subprocess.Popen, run: Path):
    process.wait()
    tail = (run / "output.log").read_text()[-3000:]
    raise RuntimeError(
        f"{' '.join(map(str, process.args))} failed ({process.returncode}):\n{tail}"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=7, help="rounds of interleaved runs")
    parser.add_argument(
        "--epochs", type=int, default=10, help="epochs per run (the first and last are dropped)"
    )
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--breakdown", action="store_true", help="also remove each callback in turn")
    only.add_argument(
        "--goal", action="store_true", help="only the project and the two loops, for more rounds"
    )
    parser.add_argument(
        "--one-at-a-time",
        action="store_true",
        help="with --goal: run the processes of a round one after the other, not in turns",
    )
    add_arguments(parser)
    args = parser.parse_args()
    if args.epochs < 3:
        parser.error("--epochs must be at least 3: the first and the last epoch are dropped")
    if args.one_at_a_time and not args.goal:
        parser.error("--one-at-a-time goes with --goal: only --goal runs in turns")

    turns = args.goal and not args.one_at_a_time
    project = setup(args)
    runs = variants(project, args.breakdown, args.goal)
    names = list(runs)
    epoch_s = {name: [] for name in names}
    faults = {name: [] for name in names}
    ratios = {name: [] for name in names}
    over_loop = {name: [] for name in names}  # the goal's measure: x Lightning's loop alone
    with tempfile.TemporaryDirectory(prefix="bench-train-") as scratch:
        for round_ in range(args.pairs):
            if not turns:
                order = names[round_ % len(names) :] + names[: round_ % len(names)]
                timed = {
                    name: train_once(project, runs[name], args.epochs, Path(scratch))
                    for name in order
                }
            else:
                timed = in_turns(project, runs, args.epochs, Path(scratch))
            seconds = {}
            for name, times in timed.items():
                seconds[name] = steady_epoch(times)
                epoch_s[name].append(seconds[name])
                faults[name].append(steady_epoch(times, "page_faults"))
            for name in names:
                ratios[name].append(seconds[name] / seconds["hand-written loop"])
                over_loop[name].append(seconds[name] / seconds[LOOP])
            print(
                f"round {round_ + 1}/{args.pairs}: "
                + ", ".join(f"{name} {seconds[name]:.3f}s" for name in names),
                flush=True,
            )

    base = median(epoch_s["project"])
    rows = []
    for name in names:
        row = [name, median(epoch_s[name]), median(ratios[name]), median(over_loop[name])]
        row.append(round(median(faults[name])))
        if args.breakdown:
            row.append((base - median(epoch_s[name])) * 1000)
        rows.append(row)
    headers = [
        "variant",
        "s/epoch (median of rounds)",
        "x hand-written (median of rounds)",
        "x Lightning's loop alone (median of rounds)",
        "page faults/epoch",
    ]
    if args.breakdown:
        headers.append("ms/epoch saved vs project")
    report(
        "train_overhead",
        f"Training: steady-state seconds per epoch, {args.pairs} interleaved rounds of {args.epochs} epochs",
        headers,
        rows,
        {
            "project": str(project),
            "pairs": args.pairs,
            "in_turns": turns,
            "epochs": args.epochs,
            "seconds_per_epoch": epoch_s,
            "page_faults_per_epoch": faults,
            "ratio_to_handwritten": ratios,
            "ratio_to_lightning_loop": over_loop,
        },
    )


if __name__ == "__main__":
    main()
