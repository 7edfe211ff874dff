"""Serve: an export over HTTP with uvicorn and onnxruntime (serving.py), without torch."""

import os
import signal
import socket
from pathlib import Path

from ..console import UserError, show
from ..inference import load_export
from ..options import ServeOptions, validated

# What the serve extra brings, by import name.
SERVE_PACKAGES = {"starlette", "uvicorn", "python_multipart"}


def api_key(variable: str | None) -> str | None:
    """The API key from the environment (or .env), None if `variable` is unset or null."""
    key = os.environ.get(variable) if variable else None
    if key is not None and not key.strip():
        raise UserError(f"{variable} is set but empty: set the API key, or unset {variable}")
    # Clients encode headers differently beyond ASCII (curl sends UTF-8, Python Latin-1), and
    # whitespace around a header value is dropped: such a key could never match.
    odd = next((char for char in key or "" if not "!" <= char <= "~"), None)
    if odd is not None:
        raise UserError(
            f"{variable} holds {odd!r}: an API key must be printable ASCII without spaces "
            "(letters, digits, punctuation), which every client sends alike in X-API-Key"
        )
    return key


def check_port(host: str, port: int) -> None:
    """One line for a port that cannot be listened on, rather than uvicorn's log and exit 3."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((host, port))
        except OSError as error:
            raise UserError(
                f"cannot listen on {host} port {port}: {error.strerror}; stop what uses it, or "
                "pass port=<another>"
            ) from None


def serve(cfg) -> None:
    """Serves the export at `cfg.model_path` until Ctrl-C or SIGTERM."""
    options: ServeOptions = validated(ServeOptions, cfg)
    # A missing export, or a model its manifest does not describe, stops here in one line,
    # before any process starts; each worker opens its own session.
    _, manifest = load_export(Path(options.model_path), variant=options.variant)
    key = api_key(options.api_key_env)
    check_port(options.host, options.port)
    try:
        from ..serving import run
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] not in SERVE_PACKAGES:
            raise
        raise UserError(f'serve needs {error.name}: pip install -e ".[serve]"') from None

    export_dir = Path(options.model_path)
    address = f"[{options.host}]" if ":" in options.host else options.host
    access = f"API key from {options.api_key_env}" if key else "no API key"
    show(
        f"serving {export_dir} at http://{address}:{options.port}/ (POST /predict, GET /health, "
        f"/info; {access}); Ctrl-C stops it",
    )
    if key is None and options.host != "127.0.0.1":  # every interface: other machines too
        variable = options.api_key_env or "<variable> with api_key_env=<variable>"
        show(
            f"note: no API key: anyone who can reach port {options.port} of this machine can use "
            f"the model; set {variable} to require one"
        )
    # uvicorn stops on SIGTERM as on Ctrl-C, answering what it holds, and then raises the signal
    # again: as KeyboardInterrupt, which it takes as the end, the exit status is 0.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    run(export_dir.parent if export_dir.is_file() else export_dir, options)
