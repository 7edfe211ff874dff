"""Files written so that a crash never leaves a half-written one behind.

No torch here: predict.py, which runs without torch, writes through these helpers too.
"""

import errno
import hashlib
import json
import math
import os
import shutil
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .console import UserError, cannot_write

# What only a write can fail with: a full disk or quota, a file over the size limit, a read-only
# filesystem. The user's environment, not a bug: one line rather than a traceback.
WRITE_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}
# What a staged folder's name adds to its destination's.
STAGING = ".staging"


@contextmanager
def staged(path: str | Path) -> Iterator[Path]:
    """Yields a temporary name next to `path`; moves it into place only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Same folder, so the move is atomic; same suffix, so writers that check it are content.
    partial = path.with_name(f".{path.stem}.partial{path.suffix}")
    try:
        yield partial
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def save_text(path: str | Path, text: str) -> None:
    with staged(path) as partial:
        partial.write_text(text)


def save_json(path: str | Path, data: dict) -> None:
    """Strict JSON, which every parser reads: NaN and infinities are written as null."""
    text = json.dumps(finite_or_none(data), indent=2, sort_keys=True, allow_nan=False)
    save_text(path, text + "\n")


def finite_or_none(data):
    """`data` with every NaN or infinite float, at any depth, replaced by None."""
    if isinstance(data, float) and not math.isfinite(data):
        return None
    if isinstance(data, dict):
        return {key: finite_or_none(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [finite_or_none(value) for value in data]
    return data


@contextmanager
def staged_folder(destination: Path, setting: str) -> Iterator[Path]:
    """A new, empty folder beside `destination` to write into, removed if a write there fails
    for want of room: the line names `destination`, whose disk is full, and the `setting` that
    moves it (the run folder may be on another disk, with room)."""
    staging = fresh_folder(destination.with_name(f"{destination.name}{STAGING}"))
    try:
        yield staging
    except OSError as error:
        if error.errno not in WRITE_ERRORS:
            raise
        shutil.rmtree(staging, ignore_errors=True)
        raise UserError(cannot_write(destination, error, setting)) from None


def fresh_folder(path: Path) -> Path:
    """`path` as a new, empty folder; whatever an earlier attempt left there is removed."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


@contextmanager
def uninterrupted() -> Iterator[None]:
    """Holds Ctrl-C and SIGTERM back until the block is done, then delivers them."""
    caught = []
    held = (signal.SIGINT, signal.SIGTERM)
    previous = {
        sig: signal.signal(sig, lambda number, frame: caught.append(number)) for sig in held
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for sig in caught:
            signal.raise_signal(sig)


def move_files(source: Path, destination: Path, names: list[str], stale: list[str] = ()) -> None:
    """Moves `names`, files or folders, from `source` into `destination` (the last one last) and
    deletes `stale` there, uninterrupted: a Ctrl-C leaves the old set of files or the new one,
    not a mix."""
    destination.mkdir(parents=True, exist_ok=True)
    with uninterrupted():
        for name in stale:
            remove(destination / name)
        for name in names:
            if (source / name).is_dir():  # os.replace replaces no folder that holds files
                remove(destination / name)
            os.replace(source / name, destination / name)


def remove(path: Path) -> None:
    """Deletes the file or folder at `path`, if there is one."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
