"""Render, train briefly, export every format, predict: the path to deployment as users walk it."""

import json

import numpy as np
import pytest
from conftest import run_in
from sklearn.datasets import load_digits

FORMATS = {"onnx": "model.onnx", "torchscript": "model.ts", "torch_export": "model.pt2"}


def read(path):
    return json.loads(path.read_text())


@pytest.mark.slow
def test_train_export_predict_through_the_cli(default_project):
    runs = default_project / "logs" / "export_flow"
    train = run_in(
        default_project, "train.py", "trainer.max_epochs=3", f"hydra.run.dir={runs / 'train'}"
    )
    assert train.returncode == 0, train.stderr[-3000:]

    best = runs / "train" / "checkpoints" / "best.ckpt"
    export = run_in(
        default_project,
        "export.py",
        f"ckpt_path={best}",
        "latency.repeats=5",  # timing is the benchmark's job; this checks that it is reported
        f"hydra.run.dir={runs / 'export'}",
    )
    assert export.returncode == 0, export.stderr[-3000:]
    report = read(runs / "export" / "report.json")
    manifest = read(runs / "export" / "manifest.json")
    assert report["passed"] and set(report["results"]) == {"eager", *FORMATS}
    assert {name: entry["file"] for name, entry in manifest["formats"].items()} == FORMATS
    assert any(line.split()[:2] == ["onnx", "model.onnx"] for line in export.stdout.splitlines())
    # torch.jit's deprecation is acknowledged in exactly one line: not hidden, not once per call.
    output = (export.stdout + export.stderr).splitlines()
    assert len([line for line in output if "torch.jit" in line]) == 1

    digits = load_digits()
    np.save(runs / "digits.npy", digits.images[-50:])  # raw values, 0..16, as the dataset has
    predict = run_in(
        default_project,
        "predict.py",
        f"model={runs / 'export'}",
        f"input={runs / 'digits.npy'}",
        f"hydra.run.dir={runs / 'predict'}",
    )
    assert predict.returncode == 0, predict.stderr[-3000:]
    assert "digits.npy[49]" in predict.stdout  # the printed table
    predictions = read(runs / "predict" / "predictions.json")["predictions"]
    labels = [int(prediction["class"]) for prediction in predictions]
    assert np.mean(np.array(labels) == digits.target[-50:]) >= 0.85
