"""Serving an export over HTTP: a Starlette app on uvicorn that reads and checks each request
in the event loop and runs onnxruntime there too, inline, batching the requests that arrive
together (batching.py); inference.py does what predict does.

uvicorn starts `workers` processes from an import string, `create_app`, and each opens its own
onnxruntime session; what it serves comes from the settings that `run` leaves in the
environment, which spawned processes inherit. No torch here.
"""

import asyncio
import json
import os
import platform
import secrets
from functools import partial
from importlib.metadata import version
from pathlib import Path

import numpy as np
import onnxruntime as ort
import uvicorn
from pydantic import ValidationError
from python_multipart.multipart import parse_options_header
from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from .api import document, request_models
from .api import top_k as api_top_k
from .batching import MicroBatcher
from .console import TooLarge, UserError
from .contract import Artifact, Manifest
from .inference import kind_of, load_export, non_finite, variant_entry
from .inference import predictions as predict_samples
from .options import ServeOptions
from .upstream import read_deadline_protocol

PAGE = Path(__file__).with_name("page.html")
# Where `run` leaves what the server processes serve: the export and the options.
SETTINGS = "SERVE_SETTINGS"
REQUEST_KEYS = {"inputs", "rows", "top_k"}
# Request headers larger than this close the connection (h11's own limit is 16 KiB).
MAX_HEADER_BYTES = 64 * 1024
# The options that GET /info shows, with whether an API key is required.
SETTINGS_SHOWN = {
    "variant",
    "workers",
    "threads",
    "max_batch_size",
    "batch_timeout",
    "max_request_bytes",
    "max_request_samples",
    "read_timeout",
    "max_connections",
}


def refuse(status: int, reason: str) -> HTTPException:
    return HTTPException(status_code=status, detail=reason)


async def parsed_request(request: Request) -> tuple[np.ndarray, int]:
    """The prepared samples of a POST /predict and its top_k, or a 4xx with a one-line reason;
    what it needs was put in `app.state` by `build_app`."""
    state = request.app.state
    manifest, limit = state.manifest, state.max_request_bytes
    body = await read_body(request, limit, state.read_timeout)
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    # Most requests have no query, which Starlette would parse all the same.
    query = request.query_params.get("top_k") if request.scope["query_string"] else None
    try:
        top_k = None if query is None else api_top_k(query)
        if media_type == "multipart/form-data":
            inputs = await from_upload(request, body, manifest, limit)
        elif media_type in ("application/json", ""):
            inputs, top_k = from_json(body, manifest, state.requests, top_k)
        else:
            raise refuse(
                415,
                f"Content-Type {media_type} is not accepted: send application/json, or an image "
                "as multipart/form-data",
            )
    except UserError as error:
        raise refuse(422, str(error)) from None
    most = request.app.state.max_request_samples
    if len(inputs) > most:
        raise refuse(
            413, f"the request holds {len(inputs)} samples, over max_request_samples={most}"
        )
    invalid = np.flatnonzero(non_finite(inputs)).tolist()
    if invalid:
        listed = ", ".join(map(str, invalid[:10])) + (", ..." if len(invalid) > 10 else "")
        which = f"sample {listed} holds" if len(invalid) == 1 else f"samples {listed} hold"
        raise refuse(422, f"{which} NaN or infinite values (or values beyond float32)")
    return inputs, 1 if top_k is None else top_k


async def read_body(request: Request, limit: int, timeout: float) -> bytes:
    """The body, refused as soon as it is known to be over `limit` bytes: by its Content-Length
    before any of it is read, or while a chunked one arrives; and refused if it has not all
    arrived within `timeout` seconds."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise refuse(413, f"the body is {declared} bytes, over max_request_bytes={limit}")
    body = bytearray()
    # One timer for the whole body, which cancels this task when it fires: asyncio.wait_for
    # would start a task for every chunk, which costs a small request more than its model.
    task, late = asyncio.current_task(), []
    assert task is not None
    timer = asyncio.get_running_loop().call_later(timeout, lambda: late.append(task.cancel()))
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise refuse(413, f"the body is over max_request_bytes={limit}")
    except asyncio.CancelledError:
        if not late:  # not the timer's: the server stops
            raise
        raise refuse(408, f"the body did not arrive within read_timeout={timeout} s") from None
    except ClientDisconnect:  # gone mid-body: an answer nobody reads, not a traceback
        raise refuse(400, "the client disconnected before sending the whole body") from None
    finally:
        timer.cancel()
    if not body:
        raise refuse(400, 'the body is empty: send JSON {"inputs": ...} or an image as "file"')
    return bytes(body)


def from_json(
    body: bytes, manifest: Manifest, models: dict, top_k: int | None
) -> tuple[np.ndarray, int | None]:
    """Model inputs from `{"inputs": raw values}` or `{"rows": [{column: value}]}` (as the input
    kind takes them), checked with the request `models` (api.py), and the request's top_k: the
    body's, else the query's (`top_k`, checked, None if the query has none)."""

    def non_standard(constant):  # Python's json reads NaN and Infinity, which JSON has not
        raise refuse(422, f"{constant} is not a JSON number; inputs must be finite numbers")

    try:
        payload = json.loads(body, parse_constant=non_standard)
    except (ValueError, RecursionError) as error:  # and UnicodeDecodeError, a ValueError
        raise refuse(400, f"the body is not valid JSON: {error}") from None
    if (
        not isinstance(payload, dict)
        or len(payload.keys() & {"inputs", "rows"}) != 1
        or payload.keys() - REQUEST_KEYS
    ):
        got = f"keys {sorted(payload)}" if isinstance(payload, dict) else type(payload).__name__
        expected = 'expected {"inputs": [...]} or {"rows": [...]}, and "top_k"'
        raise refuse(422, f"{expected}; got {got}")
    kind = kind_of(manifest)
    key = "inputs" if "inputs" in payload else "rows"
    if key not in models:  # a form the kind does not take: its own line says what it takes
        kind.from_json(payload, manifest.preprocessing)
    try:
        validated = models[key].model_validate(payload)
    except ValidationError as error:
        raise refuse(422, refusal(error, payload, manifest)) from None
    with np.errstate(over="ignore", invalid="ignore"):  # beyond float32: refused as infinite
        inputs = kind.from_json(payload, manifest.preprocessing)
    return inputs, validated.top_k if "top_k" in payload else top_k  # the body's counts


def refusal(error: ValidationError, payload: dict, manifest: Manifest) -> str:
    """The one line for a JSON body that the request model refused: the input kind's own where
    it has one (it says best what the model takes), else the first of Pydantic's."""
    problem = min(error.errors(), key=lambda e: e["type"] != "float_type")  # numbers first
    if problem["loc"][0] == "top_k":
        api_top_k(problem["input"])
    with np.errstate(over="ignore", invalid="ignore"):
        kind_of(manifest).from_json(payload, manifest.preprocessing)
    message = problem["msg"]
    got = json.dumps(problem["input"])
    got = got if len(got) <= 40 else f"{got[:40]}..."
    return f"{problem['loc'][0]}: {message[0].lower()}{message[1:]}, got {got}"


async def from_upload(request: Request, body: bytes, manifest: Manifest, limit: int) -> np.ndarray:
    """The model input of a file sent as the form field `file`, decoded as predict does."""
    kind = kind_of(manifest)
    if kind.UPLOAD is None:
        raise refuse(415, f"this model takes {kind.REQUEST}")

    async def chunks():
        yield body

    parser = MultiPartParser(
        request.headers, chunks(), max_files=1, max_fields=8, max_part_size=limit
    )
    try:
        form = await parser.parse()
    except MultiPartException as error:
        raise refuse(400, f"the multipart body is malformed: {error.message}") from None
    # The parser takes a body cut short for a form without its last part.
    boundary = parse_options_header(request.headers["content-type"])[1][b"boundary"]
    if b"--" + boundary + b"--" not in body:
        raise refuse(400, "the multipart body is malformed: it ends before its closing boundary")
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise refuse(422, 'send the file in the form field "file"')
    others = sorted(set(form.keys()) - {"file"})
    if others:
        raise refuse(422, f'send the file in the form field "file" alone; got also {others}')
    name, data = upload.filename or "the upload", await upload.read()
    try:
        return kind.from_upload(data, name, manifest.preprocessing)
    except TooLarge as error:
        raise refuse(413, str(error)) from None
    except UserError as error:
        raise refuse(400, str(error)) from None


def authorize(request: Request) -> None:
    """A 401 unless the request holds the server's API key (if it has one)."""
    key = request.app.state.api_key
    if key is None:
        return
    given = request.headers.get("x-api-key", "")
    if not secrets.compare_digest(given.encode(), key.encode()):
        raise refuse(401, "missing or wrong API key: send it in the X-API-Key header")


def encoded(answers: list) -> Response:
    """The answer of one request, as compact JSON."""
    try:
        body = json.dumps({"predictions": answers}, separators=(",", ":"), allow_nan=False)
    except ValueError:  # finite inputs so large that the network overflows
        return JSONResponse({"detail": "the model's output is not finite for these inputs"}, 422)
    return Response(body, media_type="application/json")


async def refusal_answer(request: Request, error: Exception) -> Response:
    """A refusal as JSON `{"detail": ...}`, also Starlette's own (404, 405)."""
    assert isinstance(error, HTTPException)
    return JSONResponse({"detail": error.detail}, error.status_code, headers=error.headers)


def build_app(
    session: ort.InferenceSession,
    manifest: Manifest,
    export_dir: Path,
    options: ServeOptions,
    api_key: str | None,
) -> Starlette:
    """The app of a session and its checked manifest: POST /predict, GET /health, GET /info,
    GET /openapi.json and the page at /."""
    settings = options.model_dump(include=SETTINGS_SHOWN)
    settings["api_key_required"] = api_key is not None
    model = variant_entry(manifest, options.variant, export_dir)
    about, html = info(manifest, model, settings), page(manifest)
    # The API changes with the model (its input, its classes): the document's version is its own.
    openapi = document(manifest, "Predictions of the model", model.sha256[:12], bool(api_key))
    batcher = MicroBatcher(
        partial(predict_samples, session, manifest), options.max_batch_size, options.batch_timeout
    )

    async def predict(request: Request) -> Response:
        authorize(request)  # before the body is read
        inputs, top_k = await parsed_request(request)
        return encoded(await batcher.answers(inputs, top_k))

    async def info_route(request: Request) -> Response:
        authorize(request)
        return JSONResponse(about)

    async def health(request: Request) -> Response:
        # Answered once this process holds its session: uvicorn serves only after create_app.
        return JSONResponse({"status": "ok"})

    async def openapi_route(request: Request) -> Response:
        return JSONResponse(openapi)

    async def page_route(request: Request) -> Response:
        return HTMLResponse(html)

    app = Starlette(
        routes=[
            Route("/predict", predict, methods=["POST"]),
            Route("/health", health),
            Route("/info", info_route),
            Route("/openapi.json", openapi_route),
            Route("/", page_route),
        ],
        exception_handlers={HTTPException: refusal_answer},
    )
    app.state.manifest, app.state.api_key = manifest, api_key
    app.state.max_request_bytes = options.max_request_bytes
    app.state.max_request_samples = options.max_request_samples
    app.state.read_timeout = options.read_timeout
    app.state.requests = request_models(manifest)
    return app


def create_app() -> Starlette:
    """The app of one server process, with a session of its own, from the settings that `run`
    left in the environment (the API key stays in its own variable)."""
    settings = json.loads(os.environ[SETTINGS])
    options, export_dir = ServeOptions(**settings["options"]), Path(settings["export_dir"])
    session, manifest = load_export(export_dir, options.threads, options.variant)
    key = os.environ.get(options.api_key_env) if options.api_key_env else None
    return build_app(session, manifest, export_dir, options, key)


def run(export_dir: Path, options: ServeOptions) -> None:
    """Serves until Ctrl-C or SIGTERM: `workers` uvicorn processes (uvicorn's own supervisor
    above them when there are several), each answering on the same socket. Slow or idle clients
    cannot hold it: a deadline for each request's headers (its body's is read_body's), and at
    most `max_connections` connections per process, beyond which requests get 503."""
    os.environ[SETTINGS] = json.dumps(
        {"export_dir": str(export_dir), "options": options.model_dump()}
    )
    uvicorn.run(
        f"{__name__}:create_app",
        factory=True,
        host=options.host,
        port=options.port,
        workers=options.workers,
        http=read_deadline_protocol(options.read_timeout, MAX_HEADER_BYTES),
        limit_concurrency=options.max_connections,
        log_level=options.log_level,
    )


def info(manifest: Manifest, model: Artifact, settings: dict) -> dict:
    """GET /info: what the model takes and gives, which model it is, and what serves it."""
    return {
        "task": manifest.task,
        "input": manifest.input.to_dict(),
        "target": manifest.target.to_dict(),
        "classes": getattr(manifest.target, "class_names", None),
        "model": {"file": model.file, "sha256": model.sha256},
        "versions": {
            "export": manifest.versions,
            "serve": {
                "python": platform.python_version(),
                "uvicorn": version("uvicorn"),
                "starlette": version("starlette"),
                "onnxruntime": ort.__version__,
                "numpy": np.__version__,
            },
        },
        "server": settings,
    }


def page(manifest: Manifest) -> str:
    """The page at /, with what it needs to know of the model written into it: the input kind's
    form, and what the task answers."""
    target = manifest.target
    config = {
        "task": manifest.task,
        "form": kind_of(manifest).form(manifest.preprocessing),
        "classes": len(getattr(target, "class_names", None) or []),
        "target": getattr(target, "name", None),
        "units": getattr(target, "units", None),
    }
    # Column names come from the user's table: "</script>" in one must not end the script.
    return PAGE.read_text().replace("__CONFIG__", json.dumps(config).replace("<", "\\u003c"))
