"""export.py's ONNX variants of each shipped network: model.int8.onnx, judged by the test metric,
and model.optimized.onnx, checked element by element; predict runs each of them."""

import hashlib
import json
import logging
import re
import shutil

import numpy as np
import pytest
from conftest import FAST_LATENCY, compose_config, run_cli
from sklearn.datasets import load_digits

from {{ cookiecutter.package }}.console import UserError
from {{ cookiecutter.package }}.export import onnx_int8
from {{ cookiecutter.package }}.tasks.export import export
from {{ cookiecutter.package }}.tasks.predict import predict
from {{ cookiecutter.package }}.tasks.train import train

FILES = {
    "onnx": "model.onnx",
    "onnx_int8": "model.int8.onnx",
    "onnx_optimized": "model.optimized.onnx",
}
VARIANTS = {"onnx": "fp32", "onnx_int8": "int8", "onnx_optimized": "optimized"}
# Each shipped network's training run (conftest.py), and how export quantizes it: statically
# where the graph holds convolutions, dynamically where it holds linear layers only.
NETS = {
    "cnn": ("trained_run", "static"),
    "mlp": ("mlp_run", "dynamic"),
    "transformer": ("transformer_run", "dynamic"),
}


def read(path):
    return json.loads(path.read_text())


def export_variants(run, output_dir, *overrides) -> dict:
    best = run / "checkpoints" / "best.ckpt"
    formats = f"formats=[{','.join(FILES)}]"
    overrides = [f"ckpt_path={best}", formats, *FAST_LATENCY, *overrides]
    return export(compose_config("export", output_dir, overrides, quiet=False))


@pytest.fixture(scope="module", params=NETS)
def variants(request, tmp_path_factory):
    """A network's name and the folder of its exported ONNX variants."""
    run = request.getfixturevalue(NETS[request.param][0])
    output_dir = tmp_path_factory.mktemp(f"variants-{request.param}")
    export_variants(run, output_dir)
    return request.param, output_dir


def test_each_network_exports_variants_that_pass_their_checks(variants):
    net, folder = variants
    report = read(folder / "report.json")
    assert report["passed"], report["failures"]
    results = report["results"]
    int8, optimized = results["onnx_int8"], results["onnx_optimized"]
    assert int8["quantization"]["method"] == NETS[net][1]
    assert int8["metric_drop"] <= report["max_metric_drop"] == 0.5
    assert int8["bytes"] <= 0.35 * results["onnx"]["bytes"]
    assert all(check["max_abs_diff"] <= report["atol"] for check in optimized["parity"].values())
    fusion = optimized["optimization"]
    assert fusion["fused_operators"]  # e.g. Conv + Relu into FusedConv
    if net == "transformer":
        assert fusion["optimizer"] == "transformer"
        # Two blocks; LayerNormalization: two per block and the final one.
        assert fusion["fused_patterns"] == {"Attention": 2, "LayerNormalization": 5, "Gelu": 2}
        assert fusion["not_fused"] == {}
    assert set(report["fastest_onnx_variant"]) == {"1", "37", "64"}

    manifest = read(folder / "manifest.json")
    assert {name: entry["file"] for name, entry in manifest["formats"].items()} == FILES
    for name, entry in manifest["formats"].items():
        path = folder / entry["file"]
        assert entry["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        assert entry["bytes"] == path.stat().st_size
        assert entry["variant"] == VARIANTS[name]
        assert entry["test_metric"] == results[name]["metric"]
        assert 0 < entry["test_metric"]["test/acc"] <= 1
        assert entry["max_abs_diff"] >= 0
        assert {"1", "64"} <= set(entry["latency_ms"])


@pytest.mark.parametrize("variant", ["int8", "optimized"])
def test_each_variant_predicts_through_the_cli(variants, variant, tmp_path):
    _, folder = variants
    np.save(tmp_path / "digits.npy", load_digits().images[:40])
    overrides = [f"model_path={folder}", f"input={tmp_path / 'digits.npy'}"]
    fp32 = predict(compose_config("predict", tmp_path / "fp32", overrides, quiet=False))
    result = run_cli(
        "predict.py",
        f"model={folder}",
        f"input={tmp_path / 'digits.npy'}",
        f"variant={variant}",
        f"hydra.run.dir={tmp_path / variant}",
    )
    assert result.returncode == 0, result.stderr
    output = read(tmp_path / variant / "predictions.json")
    assert output["variant"] == variant
    same = [a["class"] == b["class"] for a, b in zip(fp32, output["predictions"], strict=True)]
    # The optimized model computes what model.onnx does; the INT8 one nearly so.
    assert np.mean(same) == 1.0 if variant == "optimized" else np.mean(same) >= 0.9


def test_a_variant_file_is_run_only_as_its_variant(variants, tmp_path):
    _, folder = variants
    np.save(tmp_path / "digits.npy", load_digits().images[:3])

    def run(model, variant):
        overrides = [
            f"model_path={model}",
            f"input={tmp_path / 'digits.npy'}",
            f"variant={variant}",
        ]
        return predict(compose_config("predict", tmp_path / variant, overrides, quiet=False))

    assert len(run(folder / "model.int8.onnx", "int8")) == 3
    with pytest.raises(UserError, match=re.escape("is not the variant=fp32 model of its export")):
        run(folder / "model.int8.onnx", "fp32")


def checksums(folder) -> dict[str, str]:
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.iterdir())
        if path.is_file()
    }


def test_a_quantization_that_loses_too_much_fails_in_one_line_and_keeps_the_earlier_export(
    exported_run, trained_run, tmp_path, monkeypatch
):
    export_dir = tmp_path / "export"
    shutil.copytree(exported_run, export_dir)
    before = checksums(export_dir)
    calibrate = onnx_int8.Samples
    # Activation ranges measured on inputs a hundred times too small, as a broken pipeline
    # would give them: the quantized network clips nearly everything it sees.
    monkeypatch.setattr(onnx_int8, "Samples", lambda samples: calibrate(samples / 100))
    expected = (
        r"^onnx_int8 loses \d+\.\d\d points of test/acc against model\.onnx \(0\.\d+ -> 0\.\d+; "
        r"max_metric_drop=0\.5\); the earlier export in .* is unchanged"
    )
    with pytest.raises(UserError, match=expected) as error:
        export_variants(trained_run, tmp_path / "run", f"output_dir={export_dir}")
    assert "\n" not in str(error.value)
    assert checksums(export_dir) == before
    report = read(export_dir.with_name("export.staging") / "report.json")
    assert report["passed"] is False
    assert report["results"]["onnx_int8"]["metric_drop"] > 0.5


def test_the_feature_transformer_regresses_a_table_and_fuses_quietly(
    example_data, tmp_path, caplog, capsys
):
    overrides = [
        "data=table",
        f"data.path={example_data['diabetes']}",
        "data.target=progression",
        "model=regressor",
        "model/net=transformer",
        "trainer.max_epochs=3",
    ]
    train(compose_config("train", tmp_path / "train", overrides))
    capsys.readouterr()
    caplog.clear()
    # Under Hydra the root logger is at INFO, where onnxruntime's tools report every step.
    caplog.set_level(logging.INFO)
    report = export_variants(tmp_path / "train", tmp_path / "export")
    assert report["passed"], report["failures"]
    results = report["results"]
    assert all(set(result["metric"]) == {"test/r2"} for result in results.values())
    # One token per feature of the 10, and the CLS token: nothing in the fusion depends on it.
    fusion = results["onnx_optimized"]["optimization"]
    assert fusion["fused_patterns"] == {"Attention": 2, "LayerNormalization": 5, "Gelu": 2}
    assert results["onnx_int8"]["quantization"]["quantized_operators"] == [
        "MatMul",
        "Gemm",
        "Attention",
    ]
    assert [record.getMessage() for record in caplog.records] == []
    printed = capsys.readouterr()
    assert printed.err == ""
    assert printed.out.splitlines()[-1].startswith("exported onnx, onnx_int8, onnx_optimized to")
