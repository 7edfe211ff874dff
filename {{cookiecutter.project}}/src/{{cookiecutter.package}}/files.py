"""Files written so that a crash never leaves a half-written one behind.

No torch here: predict.py, which runs without torch, writes through these helpers too.
"""

import hashlib
import json
import math
import os
import shutil
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


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
    """Moves `names` from `source` into `destination` (the last one last) and deletes `stale`
    there, uninterrupted: a Ctrl-C leaves the old set of files or the new one, not a mix."""
    destination.mkdir(parents=True, exist_ok=True)
    with uninterrupted():
        for name in stale:
            (destination / name).unlink(missing_ok=True)
        for name in names:
            os.replace(source / name, destination / name)


def sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
