"""What a command shows its user: one-line errors, plain-text tables, and no third-party noise.

No dependencies, so torch-free commands (predict, serve) use it too.
"""

import io
import logging
import re
import sys
import warnings
from typing import NoReturn

from .upstream import LIGHTNING_LOGGERS, NOISE


class UserError(Exception):
    """A problem the user can fix; the CLI prints its message as one line, without a traceback."""

    exit_status = 1


class TooLarge(UserError):
    """An input too large to take (serve answers 413)."""


class Diverged(UserError):
    """Training stopped at a NaN or infinite loss: a run's end, but only one job's of a sweep."""


def counted(number: int, noun: str) -> str:
    """`1 row`, `3 rows`: a count as a line reads it."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


def cannot_write(
    where, error: OSError, setting: str = "hydra.run.dir=... (or paths.log_dir=...)"
) -> str:
    """The line for run files that cannot be written: a full disk, a read-only filesystem."""
    return f"cannot write to {where}: {error.strerror}; write elsewhere with {setting}"


def exit_with_error(message: str, status: int = 1) -> NoReturn:
    # Some libraries' messages span lines (Lightning's about devices): the user gets one.
    message = " ".join(line.strip() for line in message.splitlines() if line.strip())
    log_only(f"error: {message}", logging.ERROR)
    # One write: under DDP every rank stops with this line, and lines that two processes write
    # to one stderr in several pieces can interleave.
    sys.stderr.write(f"error: {message}\n")
    sys.exit(status)


def show(text: str) -> None:
    """Prints `text` for the user and keeps it in the run's log file (`log_only`)."""
    print(text, flush=True)
    log_only(text)


def log_only(text: str, level: int = logging.INFO) -> None:
    """Writes each line of `text` as a record to the log files of the root logger, Hydra's
    `<task>.log` in the run directory, and to no console. Those files get logging records only,
    not what a task prints; a logger would show the text on the console a second time."""
    root = logging.getLogger()
    if not root.isEnabledFor(level):
        return
    files = [h for h in root.handlers if isinstance(h, logging.FileHandler) and level >= h.level]
    for line in text.splitlines():
        fields = {"name": __package__, "msg": line, "levelno": level}
        record = logging.makeLogRecord(fields | {"levelname": logging.getLevelName(level)})
        for handler in files:
            handler.handle(record)


def format_table(headers: list[str], rows: list[list]) -> str:
    """The first column left-aligned as labels, the others right-aligned as values."""
    cells = [[str(cell) for cell in row] for row in [headers, *rows]]
    widths = [max(len(row[column]) for row in cells) for column in range(len(headers))]
    cells.insert(1, ["-" * width for width in widths])
    lines = []
    for label, *values in cells:
        aligned = [value.rjust(width) for value, width in zip(values, widths[1:], strict=True)]
        lines.append("  ".join([label.ljust(widths[0]), *aligned]).rstrip())
    return "\n".join(lines)


class _DropNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(re.match(pattern, message) for pattern in NOISE["log"])


def escape_unencodable() -> None:
    """A file name in another encoding than UTF-8 reaches Python as escapes (\\udcff). The
    console, where its encoding is strict (most terminals), and the run's log files write them
    escaped, rather than ending the command or logging a traceback of their own."""
    handlers = logging.getLogger().handlers
    streams = [sys.stdout, sys.stderr, *(getattr(handler, "stream", None) for handler in handlers)]
    for stream in streams:
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
            stream.reconfigure(errors="backslashreplace")


def silence_noise() -> None:
    """Filters the messages in `upstream.NOISE`, once per process, before a task runs."""
    for pattern in NOISE["warning"]:
        warnings.filterwarnings("ignore", message=pattern)
    for name in LIGHTNING_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropNoise) for f in logger.filters):
            logger.addFilter(_DropNoise())
