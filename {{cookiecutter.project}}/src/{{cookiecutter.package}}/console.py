"""What a command shows its user: one-line errors and plain-text tables.

No dependencies, so torch-free commands (predict, serve) use it too.
"""


class UserError(Exception):
    """A problem the user can fix; the CLI prints its message as one line, without a traceback."""


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
