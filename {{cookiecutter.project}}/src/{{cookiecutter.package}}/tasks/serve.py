"""Serve: an export over HTTP with LitServe and onnxruntime (serving.py), without torch."""

import multiprocessing
import os
import signal
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..console import UserError, show
from ..inference import load_export
from ..options import ServeOptions, validated

# What the serve extra brings, by import name.
SERVE_PACKAGES = {"litserve", "fastapi", "starlette", "uvicorn", "python_multipart"}


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


@contextmanager
def stopped_by_signals() -> Iterator[None]:
    """Ctrl-C and SIGTERM stop the server and every process it started.

    LitServe shuts its processes down on KeyboardInterrupt only: a SIGTERM would end this
    process alone and leave its workers serving. So both raise KeyboardInterrupt here (SIGINT too:
    a shell starts background jobs with it ignored). The workers ignore Ctrl-C (ExportAPI.setup):
    this process ends them once the HTTP processes have answered what they hold."""
    main = os.getpid()

    def stop(signum, frame):
        # The processes forked from this one inherit this handler: LitServe's manager, which
        # this process shuts down, and the HTTP processes, whose uvicorn stops on the signal and
        # then raises it again, to be ignored here.
        if os.getpid() == main:
            raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        # Stopped while starting, before LitServe would shut them down: end them here.
        for child in multiprocessing.active_children():
            child.terminate()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve(cfg) -> None:
    """Serves the export at `cfg.model_path` until Ctrl-C or SIGTERM."""
    options: ServeOptions = validated(ServeOptions, cfg)
    # A missing export, or a model its manifest does not describe, stops here in one line,
    # before any process starts; each worker opens its own session.
    _, manifest = load_export(Path(options.model_path), variant=options.variant)
    key = api_key(options.api_key_env)
    check_port(options.host, options.port)
    try:
        from ..serving import build_server, connection_limits
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] not in SERVE_PACKAGES:
            raise
        raise UserError(f'serve needs {error.name}: pip install -e ".[serve]"') from None

    export_dir = Path(options.model_path)
    server = build_server(
        export_dir.parent if export_dir.is_file() else export_dir, manifest, options, api_key=key
    )
    address = f"[{options.host}]" if ":" in options.host else options.host
    access = f"API key from {options.api_key_env}" if key else "no API key"
    show(
        f"serving {export_dir} at http://{address}:{options.port}/ (POST /predict, GET /health, "
        f"/info; {access}); Ctrl-C stops it",
    )
    with stopped_by_signals():
        server.run(
            host=options.host,
            port=options.port,
            log_level=options.log_level,
            generate_client_file=False,
            **connection_limits(options),
        )
