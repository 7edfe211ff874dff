"""Setup of `data=images` and `data=stream` on large folders: the first run against a later one.

    python benchmarks/image_setup.py [--files 10000 100000] [--rounds 2] [--project DIR]

Writes each folder once (10 classes of small PNG files, 24x24 RGB noise, in a temporary folder),
then times in fresh processes:

- `data=images`: the datamodule's `setup()` (imports not counted) with a new cache folder (the
  first run, which decodes every file), again with that folder (a later run), and with
  `data.cache_dir=null` (every run before the cache);
- `data=stream`: the first run is `python optimize.py data=images` writing the folder's splits
  as LitData chunks, a one-time cost (the whole command, start-up and its own images setup with
  a new cache folder included; CPU seconds of all its processes); a later run is the
  StreamDataModule's `setup()`, opening its training loader and taking the first batch
  (imports not counted, no worker processes, as the images setup is timed).

Wall and CPU seconds, median of the rounds, with the load average of each. Goal: a later run's
setup under 5 s at 100,000 files.
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import tempfile
from pathlib import Path

from common import (
    PACKAGE,
    add_arguments,
    median,
    project_env,
    python,
    report,
    run,
    setup,
    write_image_folder,
)

# The datamodule's setup alone, timed in its own process; prints wall and CPU seconds. The full
# garbage collection that the imports have made due (about 0.3 s with torch loaded) is theirs: it
# runs before the clock starts rather than wherever it happens to fall.
SETUP = f"""
import gc, json, sys, time
from {PACKAGE}.data import ImagesDataModule
gc.collect()
wall, cpu = time.perf_counter(), time.process_time()
ImagesDataModule(root=sys.argv[1], cache_dir=sys.argv[2] or None).setup()
print(json.dumps([time.perf_counter() - wall, time.process_time() - cpu]))
"""
# The same for a stream, up to the first training batch: LitData reads a split's index when its
# dataset is made and its first chunk when the loader starts.
STREAM_SETUP = f"""
import gc, json, sys, time
from {PACKAGE}.data.stream import StreamDataModule
gc.collect()
wall, cpu = time.perf_counter(), time.process_time()
datamodule = StreamDataModule(input_dir=sys.argv[1])
datamodule.setup()
next(iter(datamodule.train_dataloader()))
print(json.dumps([time.perf_counter() - wall, time.process_time() - cpu]))
"""


def time_setup(project: Path, code: str, *args: str) -> list[float]:
    """Wall and CPU seconds of one setup, in a fresh process."""
    done = subprocess.run(
        python("-c", code, *args),
        cwd=project,
        env=project_env(project),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def time_optimize(project: Path, root: Path, scratch: Path) -> list[float]:
    """Wall and CPU seconds (of optimize.py and the processes it waits for) of writing `root` as
    chunks to scratch/chunks, from a new images cache."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = run(
        python(
            "optimize.py",
            "data=images",
            f"data.root={root}",
            f"data.cache_dir={scratch / 'cache'}",
            f"output_dir={scratch / 'chunks'}",
            f"hydra.run.dir={scratch / 'run'}",
        ),
        project,
        project_env(project),
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return [wall, cpu]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, nargs="+", default=[10000, 100000])
    parser.add_argument("--rounds", type=int, default=2)
    add_arguments(parser)
    args = parser.parse_args()
    project = setup(args)
    rows, data = [], {}
    with tempfile.TemporaryDirectory(prefix="image-setup-") as scratch:
        for count in args.files:
            root = Path(scratch) / f"images-{count}"
            write_image_folder(root, count)
            times: dict[str, list] = {
                "first run": [],
                "later run": [],
                "no cache": [],
                "stream: first run (optimize.py, once)": [],
                "stream: later run (to the first batch)": [],
            }
            loads = []
            for round_ in range(args.rounds):
                cache = Path(scratch) / f"cache-{count}-{round_}"
                loads.append(round(os.getloadavg()[0], 2))
                times["first run"].append(time_setup(project, SETUP, str(root), str(cache)))
                times["later run"].append(time_setup(project, SETUP, str(root), str(cache)))
                times["no cache"].append(time_setup(project, SETUP, str(root), ""))
                stream = Path(scratch) / f"stream-{count}-{round_}"
                times["stream: first run (optimize.py, once)"].append(
                    time_optimize(project, root, stream)
                )
                times["stream: later run (to the first batch)"].append(
                    time_setup(project, STREAM_SETUP, str(stream / "chunks"))
                )
                shutil.rmtree(stream)  # the chunks hold every image decoded: 7 KB each
            for name, values in times.items():
                wall, cpu = median([w for w, _ in values]), median([c for _, c in values])
                rows.append([f"{count:,}", name, wall, cpu, str(loads)])
            data[str(count)] = {"times": times, "load_average_per_round": loads}
    report(
        "image_setup",
        "Seconds of data=images setup (scan, checks, statistics, split) and of data=stream "
        "(optimize.py once; setup to the first batch), median of rounds",
        ["files", "run", "wall s", "CPU s", "load average per round"],
        rows,
        data,
    )


if __name__ == "__main__":
    main()
