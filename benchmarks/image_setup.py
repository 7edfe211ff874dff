"""Setup of `data=images` on large folders: the first run, which decodes every file, against a
later one, which finds what the first learned in `data.cache_dir`.

    python benchmarks/image_setup.py [--files 10000 100000] [--rounds 2] [--project DIR]

Writes each folder once (10 classes of small PNG files, 24x24 RGB noise, in a temporary folder),
then times the datamodule's `setup()` in fresh processes (imports not counted): with a new cache
folder (the first run), again with that folder (a later run), and with `data.cache_dir=null`
(every run before the cache). Wall and CPU seconds, median of the rounds, with the load average
of each. Goal: a later run's setup under 5 s at 100,000 files.
"""

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np
from common import PACKAGE, add_arguments, median, project_env, python, report, setup
from PIL import Image

CLASSES = 10
# The datamodule's setup alone, timed in its own process; prints wall and CPU seconds.
SETUP = f"""
import json, sys, time
from {PACKAGE}.data import ImagesDataModule
wall, cpu = time.perf_counter(), time.process_time()
ImagesDataModule(root=sys.argv[1], cache_dir=sys.argv[2] or None).setup()
print(json.dumps([time.perf_counter() - wall, time.process_time() - cpu]))
"""


def write_folder(root: Path, count: int) -> None:
    rng = np.random.default_rng(0)
    for index in range(count):
        folder = root / f"class{index % CLASSES}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (24, 24, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{index}.png")


def time_setup(project: Path, root: Path, cache: str) -> list[float]:
    """Wall and CPU seconds of one setup, in a fresh process."""
    done = subprocess.run(
        python("-c", SETUP, str(root), cache),
        cwd=project,
        env=project_env(project),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


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
            write_folder(root, count)
            times: dict[str, list] = {"first run": [], "later run": [], "no cache": []}
            loads = []
            for round_ in range(args.rounds):
                cache = Path(scratch) / f"cache-{count}-{round_}"
                loads.append(round(os.getloadavg()[0], 2))
                times["first run"].append(time_setup(project, root, str(cache)))
                times["later run"].append(time_setup(project, root, str(cache)))
                times["no cache"].append(time_setup(project, root, ""))
            for name, values in times.items():
                wall, cpu = median([w for w, _ in values]), median([c for _, c in values])
                rows.append([f"{count:,}", name, wall, cpu, str(loads)])
            data[str(count)] = {"times": times, "load_average_per_round": loads}
    report(
        "image_setup",
        "Seconds of data=images setup (scan, checks, statistics, split), median of rounds",
        ["files", "run", "wall s", "CPU s", "load average per round"],
        rows,
        data,
    )


if __name__ == "__main__":
    main()
