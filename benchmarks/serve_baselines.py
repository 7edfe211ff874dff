"""What serve_load.py measures the project's server against, on the same export, with the
project's own inference.py (run inside the project: its src on the path, EXPORT set):

- `create_app`: the FastAPI app a user would write instead, a `def` endpoint under uvicorn
  (`EXPORT=<dir> uvicorn --factory serve_baselines:create_app --workers N`);
- `constant_app`: the floor of any Python HTTP server on uvicorn, an ASGI app that reads each
  request's body and answers one constant prediction, with no framework and no model
  (`uvicorn serve_baselines:constant_app --lifespan off --workers N`);
- `serve_without_model()`: serve.py itself, one process, with the model's call replaced by one
  that repeats a single answer: what everything but the model costs
  (`python -c "import serve_baselines; serve_baselines.serve_without_model()" <serve.py args>`);
- `python serve_baselines.py <export dir> <requests> <batch sizes...>`: the limit, raw values (or
  the texts of the CSV that TEXTS names) to
  predictions in one process on batches of each size, no HTTP; and the samples to send, with the
  class each gets there. Prints them as JSON.
"""

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import pandas as pd
from digit_classifier.inference import from_arrays, load_export, predictions
from fastapi import Body, FastAPI
from sklearn.datasets import load_digits


def create_app():
    session, manifest = load_export(Path(os.environ["EXPORT"]), int(os.environ.get("THREADS", 1)))
    app = FastAPI()

    @app.get("/health")
    def health():
        return "ok"

    @app.post("/predict")
    def predict(payload: Annotated[dict, Body()]):
        inputs = from_arrays(np.asarray(payload["inputs"]), manifest, "inputs")
        return {"predictions": predictions(session, manifest, inputs)}

    return app


CONSTANT = b'{"predictions":[{"class":"0","probability":1.0}]}'
CONSTANT_HEADERS = [
    (b"content-type", b"application/json"),
    (b"content-length", b"%d" % len(CONSTANT)),
]


async def constant_app(scope, receive, send):
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": CONSTANT_HEADERS})
    await send({"type": "http.response.body", "body": CONSTANT})


def raw_samples(manifest, count: int = 256) -> np.ndarray:
    """Raw inputs for the model: the digits for the default model, the texts of the table that
    TEXTS names for a text model, else random values in the range its images hold."""
    shape = manifest.input.shape[1:]
    if manifest.input.kind == "text":
        if not os.environ.get("TEXTS"):
            raise SystemExit("serve_load.py sends texts from a table: pass --texts <csv>")
        texts = pd.read_csv(os.environ["TEXTS"])[manifest.preprocessing.column]
        return np.array(texts.astype(str).tolist()[:count])
    if manifest.input.kind != "image":
        raise SystemExit("serve_load.py sends images, arrays or texts: pass such an export")
    if shape == [1, 8, 8]:
        return load_digits().images[:count, None].astype(np.float32)
    low, high = manifest.preprocessing.value_range
    return np.random.default_rng(0).uniform(low, high, (count, *shape)).astype(np.float32)


def in_process(session, manifest, raw: np.ndarray, requests: int, batches: list[int]):
    """For each batch size: raw values to predictions in one process, one batch per call."""
    results = []
    for size in batches:
        times = []
        for start in range(0, max(requests, 50) * size, size):
            batch = raw[np.arange(start, start + size) % len(raw)]
            began = time.perf_counter()
            predictions(session, manifest, from_arrays(batch, manifest, "samples"))
            times.append(time.perf_counter() - began)
        times = times[len(times) // 10 :]  # the first calls warm up
        results.append(
            {
                "batch": size,
                "samples_per_s": size * len(times) / sum(times),
                "p50_ms": 1000 * statistics.median(times),
                "p99_ms": 1000 * float(np.percentile(times, 99)),
            }
        )
    return results


def serve_without_model():
    """serve.py, with onnxruntime run once for the first batch and its first output then repeated
    for every sample. One process only: uvicorn's workers would import the module unchanged."""
    from digit_classifier import cli, serving

    outputs, first = serving.outputs, []

    def repeated(session, inputs):
        if not first:
            first.append(outputs(session, inputs[:1])[0])
        return np.broadcast_to(first[0], (len(inputs), *first[0].shape))

    serving.outputs = repeated
    cli.serve()


if __name__ == "__main__":
    export_dir, requests, *batches = sys.argv[1:]
    session, manifest = load_export(Path(export_dir), int(os.environ.get("THREADS", 1)))
    raw = raw_samples(manifest)
    answers = predictions(session, manifest, from_arrays(raw, manifest, "samples"))
    limit = in_process(session, manifest, raw, int(requests), [int(size) for size in batches])
    classes = [answer["class"] for answer in answers]
    print(json.dumps({"in_process": limit, "samples": raw.tolist(), "classes": classes}))
