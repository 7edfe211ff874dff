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

# The addresses LitServe binds: this machine only, or every IPv4 or IPv6 interface.
HOSTS = ("127.0.0.1", "0.0.0.0", "::")
# What the serve extra brings, by import name.
SERVE_PACKAGES = {"litserve", "fastapi", "starlette", "uvicorn", "python_multipart"}
# LitServe's own: how long a request may wait for a worker before it gets 504.
REQUEST_TIMEOUT = 30


def check_options(cfg) -> None:
    if not cfg.get("model_path"):
        raise UserError("serve needs model=<export dir>")
    if cfg.host not in HOSTS:
        raise UserError(
            f"host={cfg.host}: choose 127.0.0.1 (this machine only), 0.0.0.0 or :: (every "
            "interface, as in a container)"
        )
    for name, lowest, highest in [
        ("port", 1024, 65535),
        ("workers", 1, None),
        ("threads", 1, None),
        ("max_batch_size", 1, None),
        ("max_request_bytes", 1, None),
        ("max_request_samples", 1, None),
    ]:
        value = cfg[name]
        if type(value) is not int or value < lowest or (highest and value > highest):
            within = f"from {lowest} to {highest}" if highest else f"of at least {lowest}"
            raise UserError(f"{name}={value} must be a whole number {within}")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if cfg.workers * cfg.threads > cores:
        raise UserError(
            f"workers={cfg.workers} x threads={cfg.threads} onnxruntime threads would share "
            f"{cores} cores; lower workers or threads"
        )
    timeout = cfg.batch_timeout
    if type(timeout) not in (int, float) or not 0 <= timeout < REQUEST_TIMEOUT:
        raise UserError(f"batch_timeout={timeout} must be seconds from 0 to below 30")
    if cfg.max_batch_size > 1 and timeout == 0:
        raise UserError(
            "batch_timeout=0 with batching keeps an idle worker polling at full speed: e.g. "
            "batch_timeout=0.002, or max_batch_size=1 to turn batching off"
        )


def api_key(variable: str | None) -> str | None:
    """The API key from the environment (or .env), None if `variable` is unset or null."""
    key = os.environ.get(variable) if variable else None
    if key is not None and not key.strip():
        raise UserError(f"{variable} is set but empty: set the API key, or unset {variable}")
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
    check_options(cfg)
    # A missing export, or a model its manifest does not describe, stops here in one line,
    # before any process starts; each worker opens its own session.
    _, manifest = load_export(Path(cfg.model_path), variant=cfg.variant)
    key = api_key(cfg.api_key_env)
    check_port(cfg.host, cfg.port)
    try:
        from ..serving import build_server
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] not in SERVE_PACKAGES:
            raise
        raise UserError(f'serve needs {error.name}: pip install -e ".[serve]"') from None

    export_dir = Path(cfg.model_path)
    server = build_server(
        export_dir.parent if export_dir.is_file() else export_dir,
        cfg.variant,
        manifest,
        workers=cfg.workers,
        threads=cfg.threads,
        max_batch_size=cfg.max_batch_size,
        batch_timeout=cfg.batch_timeout,
        max_request_bytes=cfg.max_request_bytes,
        max_request_samples=cfg.max_request_samples,
        api_key=key,
    )
    address = f"[{cfg.host}]" if ":" in cfg.host else cfg.host
    show(
        f"serving {export_dir} at http://{address}:{cfg.port}/ (POST /predict, GET /health, "
        f"/info; {'API key from ' + cfg.api_key_env if key else 'no API key'}); Ctrl-C stops it",
    )
    with stopped_by_signals():
        server.run(
            host=cfg.host, port=cfg.port, log_level=cfg.log_level, generate_client_file=False
        )
