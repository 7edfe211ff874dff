"""serve.py's start and stop: errors at start are one line before any process starts; the
requests that arrive together run as batches, each answered as predict does; Ctrl-C and SIGTERM
stop every process a real server started."""

import http.client
import json
import os
import re
import resource
import shutil
import signal
import socket
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import compose_config, error_lines, run_cli
from servers import Server, call
from sklearn.datasets import load_digits
from starlette.exceptions import HTTPException

from {{ cookiecutter.package }}.console import UserError
from {{ cookiecutter.package }}.inference import from_arrays, load_export, predictions
from {{ cookiecutter.package }}.serving import encoded
from {{ cookiecutter.package }}.tasks.serve import serve

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
OPEN_FILES = resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def mismatched(exported_run: Path, folder: Path) -> Path:
    """A copy of the export whose manifest describes another model.onnx."""
    shutil.copytree(exported_run, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["formats"]["onnx"]["sha256"] = "0" * 64
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


EXPORT = "model_path={export}"


START_ERRORS = {
    # name: (overrides, the start of the line)
    "no model": ([], "serve needs model=<export dir>"),
    "no export": (["model_path={tmp}"], "is neither an .onnx file nor a folder with model.onnx"),
    "checksum": (["model_path={mismatched}"], "model.onnx is not the model that "),
    "host": ([EXPORT, "host=localhost"], "host=localhost: choose 127.0.0.1 (this machine only)"),
    "port": ([EXPORT, "port=80"], "port=80 must be a whole number from 1024 to 65535"),
    "port in use": ([EXPORT, "port={taken}"], "cannot listen on 127.0.0.1 port {taken}: Address"),
    "cores": ([EXPORT, f"workers={CORES + 1}"], f"workers={CORES + 1} x threads=1 onnxruntime"),
    "open files": (
        [EXPORT, f"max_connections={OPEN_FILES}"],
        f"max_connections={OPEN_FILES} must be below the open files a process may hold here",
    ),
    "batch size": ([EXPORT, "max_batch_size=0"], "max_batch_size=0 must be a whole number of"),
    "timeout": ([EXPORT, "batch_timeout=-1"], "batch_timeout=-1 must be seconds from 0 to below"),
    "long timeout": ([EXPORT, "batch_timeout=2"], "batch_timeout=2 must be seconds from 0 to"),
    "workers true": ([EXPORT, "workers=true"], "workers=True must be a whole number of at least"),
    "log level": ([EXPORT, "log_level=loud"], "log_level=loud is unknown; choose critical, error"),
    "empty key": ([EXPORT, "api_key_env=EMPTY_TEST_KEY"], "EMPTY_TEST_KEY is set but empty"),
    "key not ascii": ([EXPORT, "api_key_env=ACCENTED_TEST_KEY"], "ACCENTED_TEST_KEY holds 'é': "),
    "variant": ([EXPORT, "variant=int8"], "variant=int8 is not an ONNX model of the export in"),
}


@pytest.mark.parametrize(("overrides", "message"), START_ERRORS.values(), ids=START_ERRORS)
def test_a_server_that_cannot_start_says_why_in_one_line(
    exported_run, tmp_path, monkeypatch, overrides, message
):
    monkeypatch.setenv("EMPTY_TEST_KEY", " ")
    monkeypatch.setenv("ACCENTED_TEST_KEY", "clé")
    with socket.create_server(("127.0.0.1", 0)) as taken:  # listening, as another server would
        paths = {
            "export": exported_run,
            "tmp": tmp_path,
            "mismatched": mismatched(exported_run, tmp_path / "mismatched"),
            "taken": taken.getsockname()[1],
        }
        overrides = [override.format(**paths) for override in overrides]
        with pytest.raises(UserError) as error:
            serve(compose_config("serve", tmp_path / "run", overrides, quiet=False))
    assert message.format(**paths) in str(error.value) and "\n" not in str(error.value)


def test_the_command_prints_a_start_error_as_one_line_and_exits_1(tmp_path):
    result = run_cli("serve.py", f"model={tmp_path}", f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert error_lines(result) == [
        f"error: model={str(tmp_path)!r} is neither an .onnx file nor a folder with model.onnx; "
        "pass model=<export dir>"
    ]


def same_answers(got: list[dict], expected: list[dict]) -> bool:
    """predict.py's answers; in a batch a sample runs with others, which can move its
    probabilities in the last digits."""

    def probabilities(answers):
        return [[p["probability"], *(t["probability"] for t in p.get("top", []))] for p in answers]

    def classes(answers):
        return [[p["class"], *(t["class"] for t in p.get("top", []))] for p in answers]

    return classes(got) == classes(expected) and all(
        np.allclose(a, b, atol=1e-5)
        for a, b in zip(probabilities(got), probabilities(expected), strict=True)
    )


@pytest.mark.slow  # a real server
@pytest.mark.parametrize(("max_batch_size", "batches"), [(8, [8]), (4, [4, 4]), (1, [1] * 8)])
def test_requests_that_arrive_together_run_as_batches_and_a_bad_one_fails_alone(
    digits_export, tmp_path, max_batch_size, batches
):
    """Eight good requests (one digit or two, top_k 1 or 3) and a bad one, sent on connections
    already open while the server is stopped (SIGSTOP), arrive together when it goes on: the good
    ones run in batches of up to max_batch_size, as the debug log counts them, each answered as
    predict.py's functions answer it alone; the bad one gets its 422 and no batch fails."""
    session, manifest = load_export(digits_export)
    digits = load_digits().images[:10]
    bodies, expected = [], []
    for index in range(8):
        images, top_k = digits[index : index + 1 + index % 2], 1 + 2 * (index % 2)
        bodies.append({"inputs": images.tolist(), "top_k": top_k})
        expected.append(predictions(session, manifest, from_arrays(images, manifest, "d"), top_k))
    bodies.insert(3, {"inputs": [[1, 2, 3]]})  # the wrong shape
    overrides = [f"max_batch_size={max_batch_size}", "batch_timeout=0.5", "log_level=debug"]
    with Server(digits_export, tmp_path, *overrides) as server:
        connections = [http.client.HTTPConnection("127.0.0.1", server.port) for _ in bodies]
        for connection in connections:  # open, and accepted by the server
            connection.request("GET", "/health")
            connection.getresponse().read()
        os.kill(server.process.pid, signal.SIGSTOP)
        try:
            for connection, body in zip(connections, bodies, strict=True):
                headers = {"Content-Type": "application/json"}
                connection.request("POST", "/predict", json.dumps(body), headers)
            time.sleep(0.2)  # every request in the server's sockets
        finally:
            os.kill(server.process.pid, signal.SIGCONT)
        answers = []
        for connection in connections:
            response = connection.getresponse()
            answers.append((response.status, json.loads(response.read())))
            connection.close()
    bad = answers.pop(3)
    assert bad[0] == 422 and "expected (N, 1, 8, 8)" in bad[1]["detail"], bad
    assert [status for status, _ in answers] == [200] * 8, answers
    for (_, answer), wanted in zip(answers, expected, strict=True):
        assert same_answers(answer["predictions"], wanted), (answer, wanted)
    ran = [int(size) for size in re.findall(r"batch of (\d+) requests", server.output())]
    assert ran == batches, server.output()[-3000:]


def test_answers_are_compact_json_and_one_that_is_not_finite_gets_422():
    """pydantic_core's encoder writes the answers; one in which it would write NaN or Infinity
    goes to Python's, which writes a class so named and refuses a value that is not finite."""
    ranked = {"class": "7", "probability": 0.25}
    answers = [ranked | {"top": [ranked]}, {"class": "é", "probability": 1e-05}]
    for named in ([], [{"class": "NaN", "probability": 1.0}]):
        written = encoded(answers + named)
        assert json.loads(written) == {"predictions": answers + named} and b" " not in written
    for value in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(HTTPException) as refused:
            encoded([{"class": "7", "probability": value}])
        assert refused.value.status_code == 422
        assert refused.value.detail == "the model's output is not finite for these inputs"


@pytest.mark.slow  # real servers, one of several processes
@pytest.mark.parametrize(
    ("overrides", "signum", "group"),
    [
        # Ctrl-C in a terminal signals the whole process group; SIGTERM (`docker stop`,
        # `kill`) the main process only.
        (["max_batch_size=1", f"workers={min(2, CORES)}"], signal.SIGINT, True),
        (["host=0.0.0.0"], signal.SIGTERM, False),
    ],
    ids=["ctrl-c, no batching, 2 workers", "sigterm, every interface"],
)
def test_ctrl_c_and_sigterm_stop_every_process_of_the_server(
    digits_export, tmp_path, overrides, signum, group
):
    # A digit as a JSON array: the request body a known image export takes.
    with Server(digits_export, tmp_path, *overrides, start_new_session=True) as server:
        digit = load_digits().images[:1]
        answer = call("POST", f"{server.url}/predict", json={"inputs": digit.tolist()})
        session, manifest = load_export(digits_export)
        assert answer.json()["predictions"] == predictions(
            session, manifest, from_arrays(digit, manifest, "digit")
        )
        workers = int(next((o[8:] for o in overrides if o.startswith("workers=")), 1))
        # One process serves alone; several have uvicorn's supervisor above them (and the
        # resource tracker of the multiprocessing that spawned them).
        assert len(server.processes) == 1 if workers == 1 else len(server.processes) > workers
        status, alive = server.stop(signum, group)
    assert status == 0 and not alive, server.output()
    assert "Traceback" not in server.output()
    # Without an API key, other machines can use the model: said where they can reach it.
    assert ("note: no API key: anyone who can reach port" in server.output()) == (
        "host=0.0.0.0" in overrides
    )
