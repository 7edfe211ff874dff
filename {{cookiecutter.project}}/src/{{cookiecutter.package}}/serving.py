"""Serving an export over HTTP: a Starlette app on uvicorn that reads and checks each request
in the event loop and runs onnxruntime there too, inline, batching the requests that arrive
together (batching.py); inference.py does what predict does. POST /predict, the route that
takes the load, is a plain ASGI app (`Predict`) that the server calls without Starlette's
middleware and routing in between; Starlette routes the rest.

uvicorn starts `workers` processes from an import string, `create_app`, and each opens its own
onnxruntime session; what it serves comes from the settings that `run` leaves in the
environment, which spawned processes inherit. No torch here.
"""

import asyncio
import gc
import json
import os
import platform
import secrets
from functools import partial
from importlib.metadata import version
from pathlib import Path
from types import ModuleType

import numpy as np
import onnxruntime as ort
import pydantic_core
import uvicorn
from pydantic import ValidationError
from python_multipart.multipart import parse_options_header
from starlette.applications import Starlette
from starlette.datastructures import Headers, QueryParams, UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from .api import TOP_K, document, request_models
from .api import top_k as api_top_k
from .batching import MicroBatcher
from .console import TooLarge, UserError
from .contract import Artifact, Manifest, Preprocessing
from .inference import decoded, kind_of, load_export, non_finite, outputs, variant_entry
from .kinds import number_arrays
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
# Python's JSON encoder, for the rare answer that pydantic_core's may have written wrong.
ANSWER_JSON = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
JSON_TYPE = (b"content-type", b"application/json")


def refuse(status: int, reason: str) -> HTTPException:
    return HTTPException(status_code=status, detail=reason)


class Predict:
    """POST /predict as an ASGI app: the prepared samples of a request, checked, run with those
    of other requests (`batcher`), and their predictions; or a 4xx with a one-line reason."""

    def __init__(
        self, manifest: Manifest, options: ServeOptions, api_key: str | None, batcher: MicroBatcher
    ):
        self.manifest, self.api_key, self.batcher = manifest, api_key, batcher
        self.kind = kind_of(manifest)
        self.limit, self.most = options.max_request_bytes, options.max_request_samples
        self.deadlines = BodyDeadlines(options.read_timeout)
        self.requests = request_models(manifest)
        forms = self.kind.json_forms(manifest.preprocessing)
        self.numeric = {key for key, form in forms.items() if number_arrays(form)}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            body = await self.answer(scope, receive)
        except HTTPException as error:
            await refusal_response(error)(scope, receive, send)
            return
        headers = [(b"content-length", b"%d" % len(body)), JSON_TYPE]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def answer(self, scope: Scope, receive: Receive) -> bytes:
        # The first of a repeated header, as Starlette's Headers.get takes it.
        headers = dict(reversed(scope["headers"]))
        authorize(headers.get(b"x-api-key", b"").decode("latin-1"), self.api_key)
        declared = headers.get(b"content-length", b"").decode("latin-1")
        body = await read_body(receive, declared, self.limit, self.deadlines)
        content_type = headers.get(b"content-type", b"").decode("latin-1")
        samples, top_k, raw = await self.parsed(scope, content_type, body)
        if len(samples) > self.most:
            held = f"the request holds {len(samples)} samples"
            raise refuse(413, f"{held}, over max_request_samples={self.most}")
        return encoded(await self.batcher.answers(samples, 1 if top_k is None else top_k, raw))

    async def parsed(
        self, scope: Scope, content_type: str, body: bytes
    ) -> tuple[np.ndarray, int | None, bool]:
        """The samples of a body, its top_k (the body's, else the query's, None if neither), and
        whether the samples are raw values, which the batch they run in prepares (JSON), or model
        inputs already (an upload)."""
        media_type = content_type.split(";")[0].strip().lower()
        # Most requests have no query, which would be parsed all the same.
        query = QueryParams(scope["query_string"]).get("top_k") if scope["query_string"] else None
        try:
            top_k = None if query is None else api_top_k(query)
            if media_type == "multipart/form-data":
                headers = Headers(scope=scope)
                inputs = await from_upload(headers, body, self.manifest, self.limit)
                return inputs, top_k, False
            if media_type in ("application/json", ""):
                return *self.from_json(body, top_k), True
        except UserError as error:
            raise refuse(422, str(error)) from None
        raise refuse(
            415,
            f"Content-Type {media_type} is not accepted: send application/json, or an image "
            "as multipart/form-data",
        )

    def from_json(self, body: bytes, top_k: int | None) -> tuple[np.ndarray, int | None]:
        """The samples of `{"inputs": raw values}` or `{"rows": [{column: value}]}`, as the input
        kind reads them, checked with the request models (api.py), and the request's top_k: the
        body's, else the query's (`top_k`, checked, None if the query has none)."""
        kind, preprocessing = self.kind, self.manifest.preprocessing
        payload = request_object(body)
        key = "inputs" if "inputs" in payload else "rows"
        if key not in self.requests:  # a form the kind does not take: its own line says so
            kind.from_json(payload, preprocessing)
        if key in self.numeric and numbers_only(body, len(payload)):
            # Then the request model would check only what the kind checks, the arrays' shapes
            # (json_forms gives exactly what from_json takes), and cost as much as the rest of
            # reading the request. What either refuses goes the long way, for its line.
            try:
                inputs = kind.from_json(payload, preprocessing)
                if "top_k" in payload:
                    top_k = TOP_K.validate_python(payload["top_k"])
                return inputs, top_k
            except Exception:
                pass
        try:
            validated = self.requests[key].model_validate(payload)
        except ValidationError as error:
            raise refuse(422, refusal(error, payload, kind, self.manifest)) from None
        inputs = kind.from_json(payload, preprocessing)
        return inputs, validated.top_k if "top_k" in payload else top_k  # the body's counts


def prepared(kind: ModuleType, preprocessing: Preprocessing, raw: np.ndarray) -> np.ndarray:
    """Model inputs from the raw samples of a batch of requests, or of one: the input kind's
    `prepare` where it has one, else the samples as from_json left them; refused in one line if a
    sample is not finite (a value beyond float32)."""
    if hasattr(kind, "prepare"):
        try:
            raw = kind.prepare(raw, preprocessing, "inputs")
        except UserError as error:
            raise refuse(422, str(error)) from None
    if not np.isfinite(raw).all():  # the common case in one call; which samples, if not
        raise non_finite_refusal(raw)
    return raw


def non_finite_refusal(inputs: np.ndarray) -> HTTPException:
    invalid = np.flatnonzero(non_finite(inputs)).tolist()
    listed = ", ".join(map(str, invalid[:10])) + (", ..." if len(invalid) > 10 else "")
    which = f"sample {listed} holds" if len(invalid) == 1 else f"samples {listed} hold"
    return refuse(422, f"{which} NaN or infinite values (or values beyond float32)")


class BodyDeadlines:
    """Cancels a task that reads a body once `timeout` seconds have passed since it began, with
    one timer for every task reading: in uvloop, a timer of its own costs each request about a
    tenth of its share of the model. asyncio.wait_for would also start a task for every chunk."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        # Each task's deadline, in the order they began: the first is the next due.
        self.reading: dict[asyncio.Task, float] = {}
        self.late: set[asyncio.Task] = set()
        self.timer: asyncio.TimerHandle | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def begin(self) -> asyncio.Task:
        task, loop = asyncio.current_task(), asyncio.get_running_loop()
        assert task is not None
        self.reading[task] = due = loop.time() + self.timeout
        # A timer armed in a loop that has ended since (an app served by one loop, then
        # another) would never fire.
        if self.timer is None or loop is not self.loop:
            self.timer, self.loop = loop.call_at(due, self.expire), loop
        return task

    def end(self, task: asyncio.Task) -> None:
        self.reading.pop(task, None)
        self.late.discard(task)

    def expire(self) -> None:
        """Cancels the tasks whose deadline has passed; the timer waits for the next one."""
        loop, self.timer = asyncio.get_running_loop(), None
        while self.reading:
            task, due = next(iter(self.reading.items()))
            if due > loop.time():
                self.timer = loop.call_at(due, self.expire)
                return
            del self.reading[task]
            self.late.add(task)
            task.cancel()


async def read_body(
    receive: Receive, declared: str, limit: int, deadlines: BodyDeadlines
) -> bytes:
    """The body, refused as soon as it is known to be over `limit` bytes: by its Content-Length
    (`declared`) before any of it is read, or while a chunked one arrives; and refused if it has
    not all arrived by its deadline."""
    if declared.isdigit() and int(declared) > limit:
        raise refuse(413, f"the body is {declared} bytes, over max_request_bytes={limit}")
    chunks, size = [], 0
    task = deadlines.begin()
    try:
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":  # gone mid-body: nobody reads the answer
                raise refuse(400, "the client disconnected before sending the whole body")
            chunks.append(message.get("body", b""))
            size, more = size + len(chunks[-1]), message.get("more_body", False)
            if size > limit:
                await drain(receive, more, limit)
                raise refuse(413, f"the body is over max_request_bytes={limit}")
    except asyncio.CancelledError:
        if task not in deadlines.late:  # not the deadline's: the server stops
            raise
        timeout = deadlines.timeout
        raise refuse(408, f"the body did not arrive within read_timeout={timeout} s") from None
    finally:
        deadlines.end(task)
    if not size:
        raise refuse(400, 'the body is empty: send JSON {"inputs": ...} or an image as "file"')
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def drain(receive: Receive, more: bool, most: int) -> None:
    """Reads and drops what is left of a body over the limit, up to `most` bytes more: a client
    still sending it then reads the 413, where a connection closed under it breaks its pipe
    before it reads anything. Beyond `most`, the connection is closed all the same."""
    dropped = 0
    while more and dropped <= most:
        message = await receive()
        dropped += len(message.get("body", b""))
        more = message.get("more_body", False)


def parsed_json(body: bytes):
    """The body's JSON, as Python's json reads it. pydantic_core's parser, several times faster,
    reads alike every body that it reads at all (it refuses NaN, a byte order mark, UTF-16 and
    lone surrogates, which Python's then reads or explains)."""
    try:
        return pydantic_core.from_json(body, allow_inf_nan=False)
    except ValueError:
        pass

    def non_standard(constant):  # Python's json reads NaN and Infinity, which JSON has not
        raise refuse(422, f"{constant} is not a JSON number; inputs must be finite numbers")

    def whole(digits: str) -> float | int:  # beyond Python's limit on digits: beyond float32
        return float(digits) if len(digits) > 4000 else int(digits)

    try:
        return json.loads(body, parse_constant=non_standard, parse_int=whole)
    except (ValueError, RecursionError) as error:  # and UnicodeDecodeError, a ValueError
        raise refuse(400, f"the body is not valid JSON: {error}") from None


def request_object(body: bytes) -> dict:
    """The body's JSON object, refused unless it holds "inputs" or "rows", and maybe "top_k"."""
    payload = parsed_json(body)
    if (
        not isinstance(payload, dict)
        or len(payload.keys() & {"inputs", "rows"}) != 1
        or payload.keys() - REQUEST_KEYS
    ):
        got = f"keys {sorted(payload)}" if isinstance(payload, dict) else type(payload).__name__
        expected = 'expected {"inputs": [...]} or {"rows": [...]}, and "top_k"'
        raise refuse(422, f"{expected}; got {got}")
    return payload


def numbers_only(body: bytes, keys: int) -> bool:
    """Whether a JSON object of `keys` keys holds nothing but numbers, in arrays or not: no text
    (its only quotes are its keys'), no true, false or null, and no object inside it."""
    return (
        body.count(b'"') == 2 * keys
        and body.count(b"{") == 1
        and b"true" not in body
        and b"false" not in body
        and b"null" not in body
    )


def refusal(error: ValidationError, payload: dict, kind: ModuleType, manifest: Manifest) -> str:
    """The one line for a JSON body that the request model refused: the input kind's own where
    it has one (it says best what the model takes), else the first of Pydantic's."""
    problem = min(error.errors(), key=lambda e: e["type"] != "float_type")  # numbers first
    if problem["loc"][0] == "top_k":
        api_top_k(problem["input"])
    kind.from_json(payload, manifest.preprocessing)
    message = problem["msg"]
    got = json.dumps(problem["input"])
    got = got if len(got) <= 40 else f"{got[:40]}..."
    return f"{problem['loc'][0]}: {message[0].lower()}{message[1:]}, got {got}"


async def from_upload(headers: Headers, body: bytes, manifest: Manifest, limit: int) -> np.ndarray:
    """The model input of a file sent as the form field `file`, decoded as predict does."""
    kind = kind_of(manifest)
    if kind.UPLOAD is None:
        raise refuse(415, f"this model takes {kind.REQUEST}")

    async def chunks():
        yield body

    parser = MultiPartParser(headers, chunks(), max_files=1, max_fields=8, max_part_size=limit)
    try:
        form = await parser.parse()
    except MultiPartException as error:
        raise refuse(400, f"the multipart body is malformed: {error.message}") from None
    # The parser takes a body cut short for a form without its last part.
    boundary = parse_options_header(headers["content-type"])[1][b"boundary"]
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
        inputs = kind.from_upload(data, name, manifest.preprocessing)
    except TooLarge as error:
        raise refuse(413, str(error)) from None
    except UserError as error:
        raise refuse(400, str(error)) from None
    if not np.isfinite(inputs).all():
        raise non_finite_refusal(inputs)
    return inputs


def authorize(given: str, key: str | None) -> None:
    """A 401 unless `given` is the server's API key (if it has one)."""
    if key is not None and not secrets.compare_digest(given.encode(), key.encode()):
        raise refuse(401, "missing or wrong API key: send it in the X-API-Key header")


def encoded(answers: list) -> bytes:
    """The answer of one request, as compact JSON: pydantic_core's encoder, several times faster
    than Python's, which writes NaN and infinities as JavaScript constants, which JSON has not;
    an answer that may hold one (or a class named so) is Python's to write, or to refuse."""
    answer = pydantic_core.to_json({"predictions": answers}, inf_nan_mode="constants")
    if b"NaN" not in answer and b"Infinity" not in answer:
        return answer
    try:
        return ANSWER_JSON.encode({"predictions": answers}).encode()
    except ValueError:  # finite inputs so large that the network overflows
        raise refuse(422, "the model's output is not finite for these inputs") from None


def refusal_response(error: HTTPException) -> Response:
    """A refusal as JSON `{"detail": ...}`."""
    return JSONResponse({"detail": error.detail}, error.status_code, headers=error.headers)


async def refusal_answer(request: Request, error: Exception) -> Response:
    """Starlette's own refusals (404, 405) as the others."""
    assert isinstance(error, HTTPException)
    return refusal_response(error)


def build_app(
    session: ort.InferenceSession,
    manifest: Manifest,
    export_dir: Path,
    options: ServeOptions,
    api_key: str | None,
) -> ASGIApp:
    """The app of a session and its checked manifest: POST /predict, GET /health, GET /info,
    GET /openapi.json and the page at /."""
    settings = options.model_dump(include=SETTINGS_SHOWN)
    settings["api_key_required"] = api_key is not None
    model = variant_entry(manifest, options.variant, export_dir)
    about, html = info(manifest, model, settings), page(manifest)
    # The API changes with the model (its input, its classes): the document's version is its own.
    openapi = document(manifest, "Predictions of the model", model.sha256[:12], bool(api_key))
    batcher = MicroBatcher(
        partial(prepared, kind_of(manifest), manifest.preprocessing),
        partial(outputs, session),
        partial(decoded, manifest),
        options.max_batch_size,
        options.batch_timeout,
    )
    predict = Predict(manifest, options, api_key, batcher)

    async def info_route(request: Request) -> Response:
        authorize(request.headers.get("x-api-key", ""), api_key)
        return JSONResponse(about)

    async def health(request: Request) -> Response:
        # Answered once this process holds its session: uvicorn serves only after create_app.
        return JSONResponse({"status": "ok"})

    async def openapi_route(request: Request) -> Response:
        return JSONResponse(openapi)

    async def page_route(request: Request) -> Response:
        return HTMLResponse(html)

    routes = Starlette(
        routes=[
            Route("/predict", predict, methods=["POST"]),  # its 405 for GET, and /predict/
            Route("/health", health),
            Route("/info", info_route),
            Route("/openapi.json", openapi_route),
            Route("/", page_route),
        ],
        exception_handlers={HTTPException: refusal_answer},
    )

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        # Predictions go straight to their route, without the middleware, routing and Request
        # that Starlette would spend on each one (the template's benchmarks/README.md).
        if scope["type"] == "http" and scope["path"] == "/predict" and scope["method"] == "POST":
            await predict(scope, receive, send)
        else:
            await routes(scope, receive, send)

    return app


def create_app() -> ASGIApp:
    """The app of one server process, with a session of its own, from the settings that `run`
    left in the environment (the API key stays in its own variable)."""
    settings = json.loads(os.environ[SETTINGS])
    options, export_dir = ServeOptions(**settings["options"]), Path(settings["export_dir"])
    session, manifest = load_export(export_dir, options.threads, options.variant)
    key = os.environ.get(options.api_key_env) if options.api_key_env else None
    app = build_app(session, manifest, export_dir, options, key)
    # What the process holds by now lives as long as it: the garbage collector, which otherwise
    # looks at all of it every so often while requests come, leaves it alone.
    gc.freeze()
    return app


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
        # uvicorn logs requests at info: below it, it would make each line only to drop it.
        access_log=options.log_level in ("info", "debug", "trace"),
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
