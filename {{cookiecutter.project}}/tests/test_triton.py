"""formats=[onnx,triton]: a model repository that Triton Inference Server reads, checked with
Triton's own ModelConfig (tritonclient) against the ONNX graph it holds."""

import hashlib
import json
import shutil
from pathlib import Path

import onnx
import onnxruntime
import pytest
from conftest import FAST_LATENCY, compose_config, run_predict, trained_data, write_inputs
from google.protobuf import text_format
from onnx.helper import tensor_dtype_to_np_dtype
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import np_to_triton_dtype

from {{ cookiecutter.package }}.contract import Manifest
from {{ cookiecutter.package }}.inference import read_inputs, task_of
from {{ cookiecutter.package }}.tasks.export import export


def export_formats(run: Path, output_dir: Path, formats: str, *overrides: str) -> dict:
    best = run / "checkpoints" / "best.ckpt"
    overrides = (f"ckpt_path={best}", f"output_dir={output_dir}", f"formats={formats}", *overrides)
    return export(
        compose_config(
            "export", output_dir.parent / "run", [*overrides, *FAST_LATENCY], quiet=False
        )
    )


@pytest.fixture(scope="module")
def triton_export(trained_run, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("triton") / "export"
    assert export_formats(trained_run, folder, "[onnx,triton]")["passed"]
    return folder


def model_config(folder: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse((folder / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())


def triton_dims(shape: list) -> list[int]:
    """A shape as onnxruntime reports it, as Triton writes it: without the batch, and -1 for a
    dimension of any size (onnxruntime names those)."""
    return [size if isinstance(size, int) else -1 for size in shape[1:]]


def tensors(entries) -> list[tuple]:
    return [(e.name, model_config_pb2.DataType.Name(e.data_type), list(e.dims)) for e in entries]


def test_config_pbtxt_describes_the_onnx_graph_it_sits_beside(triton_export):
    (model,) = (triton_export / "triton").iterdir()
    assert sorted(path.relative_to(model).as_posix() for path in model.rglob("*")) == [
        "1",
        "1/model.onnx",
        "config.pbtxt",
    ]
    config = model_config(model)
    settings = compose_config("export", triton_export.parent / "settings", quiet=False).triton
    assert config.name == model.name
    assert config.backend == "onnxruntime"
    assert config.max_batch_size == settings.max_batch_size
    assert config.dynamic_batching.max_queue_delay_microseconds == (
        settings.max_queue_delay_microseconds
    )
    path = model / "1" / "model.onnx"
    graph, session = onnx.load(path).graph, onnxruntime.InferenceSession(path)
    for declared, values, shapes in (
        (config.input, graph.input, session.get_inputs()),
        (config.output, graph.output, session.get_outputs()),
    ):
        # Triton's names of numpy's types, for the types of the graph's tensors; their shapes
        # as onnxruntime reads them.
        expected = [
            (
                value.name,
                "TYPE_"
                + np_to_triton_dtype(tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)),
                triton_dims(shape.shape),
            )
            for value, shape in zip(values, shapes, strict=True)
        ]
        assert tensors(declared) == expected
    # Triton batches along the first dimension: the graph must take any batch size.
    assert all(isinstance(value.shape[0], str) for value in session.get_inputs())


def test_the_repository_holds_model_onnx_unchanged_and_the_manifest_lists_it(triton_export):
    manifest = json.loads((triton_export / "manifest.json").read_text())
    entry = manifest["formats"]["triton"]
    copy = triton_export / entry["file"]
    assert entry["file"] == f"triton/{copy.parents[1].name}/1/model.onnx"
    assert copy.read_bytes() == (triton_export / "model.onnx").read_bytes()
    assert entry["sha256"] == hashlib.sha256(copy.read_bytes()).hexdigest()
    onnx.checker.check_model(copy, full_check=True)
    report = json.loads((triton_export / "report.json").read_text())
    assert report["passed"] and set(report["results"]["triton"]["parity"]) == {"1", "37", "64"}
    assert report["results"]["triton"]["triton"]["model"] == copy.parents[1].name


def test_a_new_export_replaces_the_repository_or_removes_it(triton_export, trained_run, tmp_path):
    folder = tmp_path / "export"
    shutil.copytree(triton_export, folder)
    (model,) = (folder / "triton").iterdir()
    (model / "2").mkdir()  # a version that the earlier export did not write
    # batch_sizes=[1]: the files are the same, and fewer are timed.
    assert export_formats(trained_run, folder, "[onnx,triton]", "batch_sizes=[1]")["passed"]
    assert sorted(path.name for path in model.iterdir()) == ["1", "config.pbtxt"]
    assert export_formats(trained_run, folder, "[onnx]", "batch_sizes=[1]")["passed"]
    assert not (folder / "triton").exists()
    assert not folder.with_name("export.staging").exists()


def test_a_client_that_prepares_inputs_as_the_readme_says_gets_predict_s_answers(
    triton_export, trained_run, tmp_path
):
    """Triton runs only the model: the client reads and prepares the inputs with the manifest,
    as README.md shows, and decodes the outputs. onnxruntime runs the repository's model here,
    in Triton's place, on a batch as the dynamic batcher would join it."""
    datamodule = trained_data(trained_run)[1]
    path, _ = write_inputs(datamodule, tmp_path)
    manifest = Manifest.read(triton_export / "manifest.json")
    inputs, _ = read_inputs(path, manifest)
    (model,) = (triton_export / "triton").iterdir()
    session = onnxruntime.InferenceSession(model / "1" / "model.onnx")
    (logits,) = session.run(["logits"], {"input": inputs})
    answers = task_of(manifest).decode(logits, manifest.target)
    expected = run_predict(triton_export, path, tmp_path / "predicted")
    assert answers == [
        {k: v for k, v in p.items() if k not in ("file", "index")} for p in expected
    ]
