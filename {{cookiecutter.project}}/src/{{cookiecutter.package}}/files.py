"""Files written so that a crash never leaves a half-written one behind.

No torch here: predict.py, which runs without torch, writes through these helpers too.
"""

import hashlib
import json
import os
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
    save_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
