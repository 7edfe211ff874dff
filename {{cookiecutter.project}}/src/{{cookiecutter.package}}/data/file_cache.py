"""What setup learns of each file of a folder (an image's header, its pixel moments, or why it
cannot be read), kept between runs: a later run, and every DDP rank after the first, reads only
the files that are new or changed since. A file counts as unchanged while its size and
modification time are, as make and rsync judge it.

The cache is plain JSON (nothing in it can run code), written to a temporary file and renamed
into place, so a run killed while writing leaves the previous cache whole.
"""

import hashlib
import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pydantic_core import from_json, to_json

from ..files import save_text
from .base import note

VERSION = 1


class FileCache:
    """One cache file under `folder` per kind of result (`what`) and the settings it depends on
    (the data folder among them); `folder=None` keeps nothing and computes every result."""

    def __init__(self, folder: str | Path | None, what: str, root: str, **settings: Any):
        key = json.dumps({"what": what, "root": str(Path(root).resolve()), **settings})
        name = f"{what}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"
        self.path = Path(folder) / name if folder else None

    def load(self) -> dict[str, list]:
        """{file: [size, mtime_ns, result]} from the last run; empty if there is none, or it is
        unreadable (then everything is computed again, as on a first run)."""
        if self.path is None or not self.path.is_file():
            return {}
        try:
            stored = from_json(self.path.read_bytes())
        except (OSError, ValueError):
            return {}
        if not isinstance(stored, dict) or stored.get("version") != VERSION:
            return {}
        files = stored.get("files")
        return files if isinstance(files, dict) else {}

    def results(self, files: list[Path], compute: Callable[[Path], Any]) -> list:
        """`compute(file)` for each of `files` (JSON values), from the cache where a file is
        unchanged; the others in threads (Pillow decodes without holding the GIL)."""
        stored = self.load()
        names = [key(file) for file in files]
        stamps = [stamp(file) for file in files]
        results: list = [None] * len(files)
        todo = []
        for index, (name, now) in enumerate(zip(names, stamps, strict=True)):
            entry = stored.get(name)
            if isinstance(entry, list) and len(entry) == 3 and entry[:2] == now:
                results[index] = entry[2]
            else:
                todo.append(index)
        with ThreadPoolExecutor() as pool:
            computed = pool.map(compute, [files[i] for i in todo])
            for index, result in zip(todo, computed, strict=True):
                results[index] = result
        if self.path is not None and (todo or len(stored) != len(files)):
            entries = {n: [*s, r] for n, s, r in zip(names, stamps, results, strict=True)}
            self.save(entries)
        return results

    def save(self, entries: dict[str, list]) -> None:
        """Writes the cache; a folder that cannot be written costs the next run its reuse only."""
        try:
            save_text(self.path, to_json({"version": VERSION, "files": entries}).decode())
        except OSError as error:
            note(f"cannot keep what setup learned of the files in {self.path.parent} "
                 f"({error.strerror}): the next run decodes every file again; set "
                 "data.cache_dir to a folder that can be written")  # fmt: skip


def key(file: Path) -> str:
    """The file's path as JSON can hold it: a name in another encoding than UTF-8 reaches Python
    as escapes (\\udce9), which UTF-8 cannot write; here its bytes are spelled out (\\xe9)."""
    return str(file).encode(errors="surrogateescape").decode(errors="backslashreplace")


def stamp(file: Path) -> list[int]:
    """Size and modification time; a file gone since the scan matches no cache entry, and
    reading it reports it."""
    try:
        info = os.stat(file)
    except OSError:
        return [-1, -1]
    return [info.st_size, info.st_mtime_ns]
