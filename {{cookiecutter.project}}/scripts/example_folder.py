"""The folder an example script writes into, from its command line: `--help` shows how to run
the script, and a file where the folder should be is refused in one line. Ctrl-C while the
script writes is one line too."""

import signal
import sys
from pathlib import Path


def folder_argument(usage: str) -> Path:
    """The one argument, a folder or where one is to be made; else `usage`, and exit 1."""
    arguments = sys.argv[1:]
    if arguments in (["-h"], ["--help"]):
        print(usage)
        sys.exit(0)
    if len(arguments) != 1 or arguments[0].startswith("-"):
        sys.exit(usage)
    folder = Path(arguments[0])
    if folder.exists() and not folder.is_dir():
        sys.exit(f"error: {folder} is a file; pass a folder to write the example data into")
    signal.signal(signal.SIGINT, stopped)
    return folder


def stopped(signum: int, frame) -> None:
    # What was written stays; the scripts are deterministic, so a second run writes it all.
    sys.stderr.write("stopped by Ctrl-C; run the script again to write the whole example\n")
    sys.exit(128 + signum)
