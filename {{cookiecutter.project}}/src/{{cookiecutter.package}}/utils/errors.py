class UserError(Exception):
    """A problem the user can fix; the CLI prints its message as one line, without a traceback."""
