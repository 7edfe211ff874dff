"""serve.py without HTTP: errors at start are one line before any process starts, the worker's
side of a batch, and Ctrl-C and SIGTERM, which stop every process a real server started."""

import json
import os
import pickle
import shutil
import signal
import socket
from pathlib import Path

import pytest
from conftest import compose_config, default_datamodule, error_lines, run_cli, write_inputs
from servers import Server, call
from sklearn.datasets import load_digits

from {{ cookiecutter.package }}.console import UserError
from {{ cookiecutter.package }}.inference import (
    from_arrays,
    load_export,
    predictions,
    read_inputs,
)
from {{ cookiecutter.package }}.serving import ExportAPI, Samples
from {{ cookiecutter.package }}.tasks.serve import serve

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


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
    "batch size": ([EXPORT, "max_batch_size=0"], "max_batch_size=0 must be a whole number of"),
    "busy wait": ([EXPORT, "batch_timeout=0"], "batch_timeout=0 with batching keeps an idle"),
    "timeout": ([EXPORT, "batch_timeout=-1"], "batch_timeout=-1 must be seconds from 0 to below"),
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


def test_a_worker_answers_each_request_of_a_batch_as_predict_does(exported_run, tmp_path):
    api = ExportAPI(str(exported_run), "fp32", threads=1, max_batch_size=8, batch_timeout=0.01)
    api = pickle.loads(pickle.dumps(api))  # as LitServe hands it to a worker: before setup
    api.setup("cpu")
    session, manifest = load_export(exported_run)
    # Six test samples of the default data, prepared as predict.py prepares them.
    path, _ = write_inputs(default_datamodule(tmp_path / "data"), tmp_path / "samples", count=6)
    images = read_inputs(path, manifest)[0]
    batch = [Samples(images[:1], 1), Samples(images[1:4], 3), Samples(images[4:], 1)]
    answers = api.predict(batch)
    assert answers == [
        predictions(session, manifest, images[:1]),
        predictions(session, manifest, images[1:4], top_k=3),
        predictions(session, manifest, images[4:]),
    ]
    assert api.predict(batch[1]) == answers[1]  # max_batch_size=1: one request, unbatched
    assert json.loads(api.encode_response(answers[1]).body) == {"predictions": answers[1]}
    # A model whose output overflows gives that request a 422 of its own, not invalid JSON.
    broken = api.encode_response([{"class": "3", "probability": float("nan")}])
    assert broken.status_code == 422 and b"not finite" in broken.body
    assert repr(Samples(images, 2)) == "Samples(6, top_k=2)"  # LitServe formats it per request


@pytest.mark.slow  # servers of several processes
@pytest.mark.parametrize(
    ("overrides", "signum", "group"),
    [
        # Ctrl-C in a terminal signals the whole process group; SIGTERM (`docker stop`,
        # `kill`) the main process only.
        (["max_batch_size=1", f"workers={min(2, CORES)}"], signal.SIGINT, True),
        ([], signal.SIGTERM, False),
    ],
    ids=["ctrl-c, no batching, 2 workers", "sigterm"],
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
        assert len(server.processes) >= 4  # LitServe's manager, a worker, an HTTP process
        status, alive = server.stop(signum, group)
    assert status == 0 and not alive, server.output()
    assert "Traceback" not in server.output()
