"""export.py's ONNX variants of each shipped network: model.int8.onnx, judged by the test metric,
and model.optimized.onnx, checked element by element; predict runs each of them, and OpenVINO and
onnx's reference evaluator each one whose manifest entry names them."""

import hashlib
import json
import logging
import re
import shutil

import numpy as np
import onnx
import pytest
from conftest import DIGITS, FAST_LATENCY, compose_config, run_cli
from runtimes import OTHER_RUNTIMES
from sklearn.datasets import load_digits

from {{ cookiecutter.package }}.console import UserError
from {{ cookiecutter.package }}.contract import Manifest
from {{ cookiecutter.package }}.export import onnx_int8
from {{ cookiecutter.package }}.export.onnx_graph import fuse_transformer
from {{ cookiecutter.package }}.inference import from_arrays
from {{ cookiecutter.package }}.onnx_session import open_session, run
from {{ cookiecutter.package }}.tasks.export import export
from {{ cookiecutter.package }}.tasks.predict import predict
from {{ cookiecutter.package }}.tasks.train import train

FILES = {
    "onnx": "model.onnx",
    "onnx_int8": "model.int8.onnx",
    "onnx_optimized": "model.optimized.onnx",
}
VARIANTS = {"onnx": "fp32", "onnx_int8": "int8", "onnx_optimized": "optimized"}
# Each shipped network's training run on the digits (conftest.py), how export quantizes it
# (statically where the graph holds convolutions, dynamically where it holds linear layers only)
# and the opset of its INT8 file: the export's, 18, or 19 for QuantizeLinear and
# DequantizeLinear.
NETS = {
    "cnn": ("digits_run", "static", 19),
    "mlp": ("mlp_run", "dynamic", 18),
    "transformer": ("transformer_run", "dynamic", 18),
}
# The operator domains each variant's file uses: ONNX's own, and in the optimized file
# onnxruntime's own (FusedConv, FusedGemm, Attention, BiasGelu), which only it implements.
DOMAINS = {
    "onnx": {"ai.onnx": 18},
    "onnx_int8": {"ai.onnx": 18},
    "onnx_optimized": {"ai.onnx": 18, "com.microsoft": 1},
}
PORTABLE = ["onnxruntime", "openvino", "onnx.reference"]


def read(path):
    return json.loads(path.read_text())


def export_variants(run, output_dir, *overrides) -> dict:
    best = run / "checkpoints" / "best.ckpt"
    formats = f"formats=[{','.join(FILES)}]"
    overrides = [f"ckpt_path={best}", formats, *FAST_LATENCY, *overrides]
    return export(compose_config("export", output_dir, overrides, quiet=False))


def check_report_and_manifest(net: str, folder) -> None:
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
        domains = DOMAINS[name] | ({"ai.onnx": NETS[net][2]} if name == "onnx_int8" else {})
        assert entry["opset_domains"] == results[name]["opset_domains"] == domains
        assert entry["runtimes"] == (PORTABLE if len(domains) == 1 else ["onnxruntime"])
        # The file imports the domains its nodes use, and no other.
        model = onnx.load(path)
        imported = {opset.domain or "ai.onnx": opset.version for opset in model.opset_import}
        assert imported == domains
        assert {node.domain or "ai.onnx" for node in model.graph.node} == set(domains)
        assert entry["test_metric"] == results[name]["metric"]
        assert 0 < entry["test_metric"]["test/acc"] <= 1
        assert entry["max_abs_diff"] >= 0
        assert {"1", "64"} <= set(entry["latency_ms"])


def check_each_variant_runs_in_the_runtimes_its_manifest_names(folder) -> None:
    manifest = Manifest.read(folder / "manifest.json")
    inputs = from_arrays(load_digits().images[:100], manifest, "digits")
    for name, entry in manifest.formats.items():
        path = folder / entry.file
        expected = run(open_session(path), inputs)
        assert entry.runtimes and entry.runtimes[0] == "onnxruntime"
        for runtime in entry.runtimes[1:]:
            outputs = OTHER_RUNTIMES[runtime](path)(inputs)
            difference = np.abs(outputs - expected).max()
            if name == "onnx_int8":
                # Each runtime rounds 8-bit arithmetic its own way (OpenVINO and the reference
                # evaluator agree to the bit here, onnxruntime's integer kernels differ): logits
                # move by a fraction of their range, a class seldom.
                assert difference <= 0.25 * np.abs(expected).max(), (name, runtime)
                same = outputs.argmax(axis=1) == expected.argmax(axis=1)
                assert same.mean() >= 0.95, (name, runtime)
            else:
                assert difference <= 1e-4, (name, runtime)


def predict_in_process(model, inputs, variant, output_dir) -> list[dict]:
    overrides = [f"model_path={model}", f"input={inputs}", f"variant={variant}"]
    return predict(compose_config("predict", output_dir, overrides, quiet=False))


def check_each_variant_predicts_through_the_cli(folder, tmp_path) -> None:
    inputs = tmp_path / "digits.npy"
    np.save(inputs, load_digits().images[:40])
    fp32 = predict_in_process(folder, inputs, "fp32", tmp_path / "fp32")
    for variant in ("int8", "optimized"):
        result = run_cli(
            "predict.py",
            f"model={folder}",
            f"input={inputs}",
            f"variant={variant}",
            f"hydra.run.dir={tmp_path / variant}",
        )
        assert result.returncode == 0, result.stderr
        output = read(tmp_path / variant / "predictions.json")
        assert output["variant"] == variant
        same = [a["class"] == b["class"] for a, b in zip(fp32, output["predictions"], strict=True)]
        # The optimized model computes what model.onnx does; the INT8 one nearly so.
        assert np.mean(same) == 1.0 if variant == "optimized" else np.mean(same) >= 0.9
    # A variant's file runs as that variant only: the manifest says what it is.
    assert predict_in_process(folder / "model.int8.onnx", inputs, "int8", tmp_path / "file")
    with pytest.raises(UserError, match=re.escape("is not the variant=fp32 model of its export")):
        predict_in_process(folder / "model.int8.onnx", inputs, "fp32", tmp_path / "wrong")


# One test per network: its export is made once, on whichever worker runs the test.
@pytest.mark.slow  # trains a network for it and exports every variant
@pytest.mark.parametrize("net", NETS)
def test_each_network_exports_variants_that_pass_their_checks_and_predict(net, request, tmp_path):
    export_variants(request.getfixturevalue(NETS[net][0]), tmp_path / "export")
    check_report_and_manifest(net, tmp_path / "export")
    check_each_variant_runs_in_the_runtimes_its_manifest_names(tmp_path / "export")
    check_each_variant_predicts_through_the_cli(tmp_path / "export", tmp_path)


def test_a_pattern_that_does_not_fuse_is_named_with_the_reason(exported_run, tmp_path):
    # The default network (the CNN or the MLP) holds no attention, LayerNorm or GELU for the
    # transformer optimizer to fuse.
    fusion = fuse_transformer(exported_run / "model.onnx", tmp_path / "fused.onnx", 4, 64)
    assert fusion["fused_patterns"] == {"Attention": 0, "LayerNormalization": 0, "Gelu": 0}
    assert set(fusion["not_fused"]) == set(fusion["fused_patterns"])
    assert "scores divided by sqrt(head size)" in fusion["not_fused"]["Attention"]


def checksums(folder) -> dict[str, str]:
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.iterdir())
        if path.is_file()
    }


# The CNN on the digits: static quantization, the kind that calibrates on samples.
def test_a_quantization_that_loses_too_much_fails_in_one_line_and_keeps_the_earlier_export(
    digits_export, digits_run, tmp_path, monkeypatch
):
    export_dir = tmp_path / "export"
    shutil.copytree(digits_export, export_dir)
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
        export_variants(digits_run, tmp_path / "run", f"output_dir={export_dir}")
    assert "\n" not in str(error.value)
    assert checksums(export_dir) == before
    report = read(export_dir.with_name("export.staging") / "report.json")
    assert report["passed"] is False
    assert report["results"]["onnx_int8"]["metric_drop"] > 0.5


@pytest.mark.slow  # trains a network for it and exports every variant
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
    # Unfused: a fused attention would be quantized into onnxruntime's own QAttention.
    assert results["onnx_int8"]["quantization"]["quantized_operators"] == ["MatMul", "Gemm"]
    assert results["onnx_int8"]["opset_domains"] == {"ai.onnx": 18}
    assert [record.getMessage() for record in caplog.records] == []
    printed = capsys.readouterr()
    assert printed.err == ""
    # The table (two header lines, eager and three formats), the fastest variant, the folder;
    # and on a busy machine the line that says the timings are too noisy to compare.
    noisy = "warning: latency too noisy to compare formats"
    lines = [line for line in printed.out.splitlines() if not line.startswith(noisy)]
    assert len(lines) == 8 and lines[-2].startswith("fastest ONNX variant: ")
    assert lines[-1].startswith("exported onnx, onnx_int8, onnx_optimized to")


@pytest.mark.slow  # trains a network for it and exports every variant
def test_the_vision_transformer_regresses_the_digits_value_and_predicts_numbers(tmp_path):
    overrides = [
        *DIGITS,
        "data.task=regression",
        "model=regressor",
        "model/net=transformer",
        "trainer.max_epochs=3",
    ]
    train(compose_config("train", tmp_path / "train", overrides))
    report = export_variants(tmp_path / "train", tmp_path / "export")
    assert report["passed"], report["failures"]
    results = report["results"]
    assert all(set(result["metric"]) == {"test/r2"} for result in results.values())
    assert results["onnx"]["metric"]["test/r2"] > 0.5
    fusion = results["onnx_optimized"]["optimization"]
    assert fusion["fused_patterns"] == {"Attention": 2, "LayerNormalization": 5, "Gelu": 2}
    manifest = read(tmp_path / "export" / "manifest.json")
    assert manifest["task"] == "regression" and manifest["target"]["name"] == "digit"
    inputs = tmp_path / "digits.npy"
    np.save(inputs, load_digits().images[:20])
    predicted = predict_in_process(tmp_path / "export", inputs, "optimized", tmp_path / "out")
    assert all(set(entry) >= {"value"} and "class" not in entry for entry in predicted)
    values = np.array([entry["value"] for entry in predicted])
    assert np.corrcoef(values, load_digits().target[:20])[0, 1] > 0.7
