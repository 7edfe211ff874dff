"""Serving an export over HTTP with LitServe: the LitAPI that runs onnxruntime in each worker
process, and the parsing of requests, with inference.py doing what predict does.

LitServe runs `decode_request` of every request in a batch inside one `try`: one bad request
would fail all of its batch. So requests are read and checked in the HTTP process instead, by a
FastAPI dependency that LitServe takes from `decode_request`'s annotation; a bad one is answered
there with a 4xx and never reaches a worker, which only gets prepared float32 samples.

No torch here, directly or through LitServe (accelerator="cpu" keeps it from looking for one).
"""

import asyncio
import json
import platform
import secrets
import signal
from importlib.metadata import version
from itertools import islice
from pathlib import Path
from typing import Annotated, NamedTuple

import litserve as ls
import numpy as np
import onnxruntime as ort
import python_multipart  # noqa: F401  (starlette parses uploads with it, and fails without)
from fastapi import Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import ValidationError
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import ClientDisconnect

from .api import document, request_models
from .api import top_k as api_top_k
from .console import TooLarge, UserError
from .contract import Artifact, Manifest
from .inference import kind_of, load_export, non_finite, variant_entry
from .inference import predictions as predict_samples
from .options import ServeOptions
from .upstream import (
    parsed_in_http_process,
    read_deadline_protocol,
    remove_litserve_routes,
    take_litserve_route,
)

PAGE = Path(__file__).with_name("page.html")
# Answered without the API key: a load balancer's probe, and a page that holds no data.
OPEN_PATHS = ("/", "/health", "/openapi.json")
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


class Samples(NamedTuple):
    """One request's prepared model inputs, as the HTTP process hands them to a worker."""

    inputs: np.ndarray
    top_k: int

    def __repr__(self) -> str:
        # LitServe formats every request into a debug message, logged or not: an array's repr
        # would cost more than the model.
        return f"Samples({len(self.inputs)}, top_k={self.top_k})"


def refuse(status: int, reason: str) -> HTTPException:
    return HTTPException(status_code=status, detail=reason)


async def parsed_request(request: Request) -> Samples:
    """The samples of a POST /predict, or a 4xx with a one-line reason. Runs in the HTTP process
    (see the module's docstring); what it needs was put in `app.state` by `build_server`."""
    state = request.app.state
    manifest, limit = state.manifest, state.max_request_bytes
    body = await read_body(request, limit, state.read_timeout)
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    query = request.query_params.get("top_k")
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
    return Samples(inputs, 1 if top_k is None else top_k)


async def read_body(request: Request, limit: int, timeout: float) -> bytes:
    """The body, refused as soon as it is known to be over `limit` bytes: by its Content-Length
    before any of it is read, or while a chunked one arrives; and refused if it has not all
    arrived within `timeout` seconds."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise refuse(413, f"the body is {declared} bytes, over max_request_bytes={limit}")
    body = bytearray()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    chunks = request.stream().__aiter__()
    while True:
        try:
            chunk = await asyncio.wait_for(chunks.__anext__(), deadline - loop.time())
        except StopAsyncIteration:
            break
        except asyncio.TimeoutError:  # noqa: UP041  (the builtin one only from Python 3.11)
            raise refuse(408, f"the body did not arrive within read_timeout={timeout} s") from None
        except ClientDisconnect:  # gone mid-body: an answer nobody reads, not a traceback
            raise refuse(400, "the client disconnected before sending the whole body") from None
        body += chunk
        if len(body) > limit:
            raise refuse(413, f"the body is over max_request_bytes={limit}")
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


class ExportAPI(ls.LitAPI):
    """Predictions of an export, as predict.py makes them: one onnxruntime session per worker.

    Pickled to each worker process, so it holds only the export's path, the ONNX variant and the
    thread count until `setup` runs there."""

    def __init__(self, export_dir: str, variant: str, threads: int, **batching):
        super().__init__(**batching)
        self.export_dir, self.variant, self.threads = export_dir, variant, threads

    def setup(self, device):
        # Ctrl-C reaches every process in a terminal: the main process stops this one, after
        # the HTTP processes have answered what they hold (tasks/serve.py).
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        self.session, self.manifest = load_export(
            Path(self.export_dir), self.threads, self.variant
        )

    def decode_request(self, request: Annotated[Samples, parsed_in_http_process(parsed_request)]):
        return request

    def predict(self, batch):
        """The predictions of each request; its samples run in one call with those of the
        other requests of its batch that ask for the same top_k."""
        requests = batch if isinstance(batch, list) else [batch]  # max_batch_size 1: unbatched
        answers: list[list[dict] | None] = [None] * len(requests)
        for top_k in {request.top_k for request in requests}:
            group = [index for index, request in enumerate(requests) if request.top_k == top_k]
            inputs = np.concatenate([requests[index].inputs for index in group])
            results = iter(predict_samples(self.session, self.manifest, inputs, top_k))
            for index in group:
                answers[index] = list(islice(results, len(requests[index].inputs)))
        return answers if isinstance(batch, list) else answers[0]

    def encode_response(self, output):
        # A Response goes back to the HTTP process as it is, and out unchanged.
        try:
            body = json.dumps({"predictions": output}, separators=(",", ":"), allow_nan=False)
        except ValueError:  # finite inputs so large that the network overflows
            reason = "the model's output is not finite for these inputs"
            return JSONResponse({"detail": reason}, status_code=422)
        return Response(body, media_type="application/json")

    async def authorize(self, request: Request):
        """LitServe's authentication hook, a dependency of its routes and of /info. Async:
        FastAPI would run a plain function in a thread, one thread hop per request."""
        key = request.app.state.api_key
        if key is None or request.url.path in OPEN_PATHS:
            return
        given = request.headers.get("x-api-key", "")
        if not secrets.compare_digest(given.encode(), key.encode()):
            raise refuse(401, "missing or wrong API key: send it in the X-API-Key header")


def build_server(
    export_dir: Path, manifest: Manifest, options: ServeOptions, api_key: str | None
) -> ls.LitServer:
    """The server of an export whose manifest is checked: POST /predict, GET /health, GET /info,
    GET /openapi.json and the page at /."""
    api = ExportAPI(
        str(export_dir),
        options.variant,
        options.threads,
        max_batch_size=options.max_batch_size,
        batch_timeout=options.batch_timeout,
    )
    # accelerator="cpu": "auto" imports torch to look for a GPU. onnxruntime chooses its own
    # providers. Not FastAPI's OpenAPI document: /predict reads its body itself, so that one
    # would describe none; api.py's describes it, and no pages that load scripts from the web.
    server = ls.LitServer(
        api, accelerator="cpu", workers_per_device=options.workers, disable_openapi_url=True
    )
    app = server.app
    # The HTTP processes are forked from this one with what it holds.
    app.state.manifest, app.state.api_key = manifest, api_key
    app.state.max_request_bytes = options.max_request_bytes
    app.state.max_request_samples = options.max_request_samples
    app.state.read_timeout = options.read_timeout
    app.state.requests = request_models(manifest)
    settings = options.model_dump(include=SETTINGS_SHOWN)
    settings["api_key_required"] = api_key is not None
    about = info(manifest, variant_entry(manifest, options.variant, export_dir), settings)
    html = page(manifest)
    openapi = document(manifest, "Predictions of the model", version("litserve"), bool(api_key))
    litserve_health = take_litserve_route(app, "/health")

    async def info_route():
        return JSONResponse(about)

    async def page_route():
        return HTMLResponse(html)

    async def openapi_route():
        return JSONResponse(openapi)

    async def health_route(request: Request):
        # LitServe's check, whether every worker is ready, answered as JSON.
        ready = (await litserve_health(request)).status_code == 200
        status = "ok" if ready else "not ready"
        return JSONResponse({"status": status}, status_code=200 if ready else 503)

    remove_litserve_routes(app, ("/", "/info"))  # LitServe's own, which would answer first
    app.add_api_route("/health", health_route, methods=["GET"])
    app.add_api_route("/openapi.json", openapi_route, methods=["GET"])
    app.add_api_route("/info", info_route, methods=["GET"], dependencies=[Depends(api.authorize)])
    app.add_api_route("/", page_route, methods=["GET"])
    return server


def connection_limits(options: ServeOptions) -> dict:
    """What `LitServer.run` passes on to uvicorn so that slow or idle clients cannot hold the
    server: a deadline for each request's headers (its body's is read_body's), and at most
    `max_connections` connections per HTTP process, beyond which requests get 503."""
    return {
        "http": read_deadline_protocol(options.read_timeout, MAX_HEADER_BYTES),
        "limit_concurrency": options.max_connections,
    }


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
                "litserve": version("litserve"),
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
