"""export.py: each format, reloaded by its own runtime, computes what the trained model does."""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from conftest import (
    ALLOWED,
    FAST_LATENCY,
    ROOT,
    compose_config,
    contract_of,
    default_datamodule,
    kept_in_log,
    read_checkpoint,
    run_cli,
    write_inputs,
)

from {{ cookiecutter.package }}.console import UserError
from {{ cookiecutter.package }}.export.report import latency_warning
from {{ cookiecutter.package }}.export.verify import latency
from {{ cookiecutter.package }}.files import staged
from {{ cookiecutter.package }}.kinds import model_shape
from {{ cookiecutter.package }}.options import ExportOptions, validated
from {{ cookiecutter.package }}.tasks.export import export, load_net_and_samples
from {{ cookiecutter.package }}.tasks.predict import predict

FILES = {"onnx": "model.onnx", "torchscript": "model.ts", "torch_export": "model.pt2"}


def read(path):
    return json.loads(path.read_text())


def test_manifest_describes_the_input_and_checksums_every_file(exported_run, tmp_path):
    manifest = read(exported_run / "manifest.json")
    assert {name: entry["file"] for name, entry in manifest["formats"].items()} == FILES
    for entry in manifest["formats"].values():
        digest = hashlib.sha256((exported_run / entry["file"]).read_bytes()).hexdigest()
        assert entry["sha256"] == digest
    # The data contract of training, as a datamodule of the default data declares it afresh.
    contract = contract_of(default_datamodule(tmp_path))
    shape = model_shape(contract["input"]["kind"], contract["input"]["shape"])
    assert manifest["input"] == {"name": "input", **contract["input"], "shape": ["batch", *shape]}
    assert manifest["preprocessing"] == contract["preprocessing"]
    assert manifest["task"] == contract["target"]["task"]
    assert manifest["target"] == contract["target"]  # class names, or a value's units and scale
    assert manifest["opset"] == 18
    assert manifest["versions"]["torch"] == torch.__version__
    assert not list(exported_run.glob(".*partial*"))  # nothing half-written left behind


def test_report_holds_parity_and_latency_per_format_and_batch_size(exported_run, task):
    report = read(exported_run / "report.json")
    assert report["passed"] and not report["failures"]
    assert set(report["results"]) == {"eager", *FILES}
    for result in report["results"].values():
        assert set(result["parity"]) == set(result["latency_ms"]) == {"1", "37", "64"}
        assert set(result["latency_spread"]) == {"1", "37", "64"}
        assert all(spread >= 0 for spread in result["latency_spread"].values())
        assert all(check["max_abs_diff"] <= report["atol"] for check in result["parity"].values())
        if task == "classification":  # and the same class for every sample
            assert all(check["argmax_agreement"] == 1.0 for check in result["parity"].values())
        assert all(ms > 0 for ms in result["latency_ms"].values())


@pytest.mark.slow  # an export.py process
def test_too_few_latency_repeats_warn_in_one_line_and_leave_out_the_speed_ups(
    trained_run, tmp_path
):
    best = trained_run / "checkpoints" / "best.ckpt"
    overrides = [f"ckpt_path={best}", "formats=[onnx]", *FAST_LATENCY, f"hydra.run.dir={tmp_path}"]
    result = run_cli("export.py", *overrides)
    assert result.returncode == 0, result.stderr
    [warning] = [line for line in result.stdout.splitlines() if line.startswith("warning:")]
    assert warning.startswith("warning: latency too noisy to compare formats, speed-ups left out")
    assert "latency.repeats=3 is too few to tell (at least 10)" in warning
    report = read(tmp_path / "report.json")
    assert report["latency_warning"] == warning
    assert report["cores"] >= 1 and report["load_average"] >= 0
    table = [line for line in result.stdout.splitlines() if line.startswith(("eager", "onnx "))]
    assert len(table) == 2 and not any(re.search(r"\dx\)", line) for line in table)


def timed(*seconds: float) -> dict:
    """Latency results of a real call that sleeps for each of `seconds` in turn."""
    calls = iter(seconds * 20)

    def run(inputs):
        time.sleep(next(calls))

    ms, spread = latency(run, np.zeros(1), warmup=0, repeats=20)
    return {"latency_ms": {"1": ms}, "latency_spread": {"1": spread}}


def test_latency_warns_of_timings_that_spread_and_of_a_busy_machine():
    steady, jumpy = timed(0.02), timed(0.002, 0.002, 0.03)
    assert latency_warning({"eager": steady, "onnx": steady}, 20, load=0.5, cores=2) is None
    spread = latency_warning({"eager": steady, "onnx": jumpy}, 20, load=0.5, cores=2)
    assert re.fullmatch(
        r"warning: latency too noisy to compare formats, speed-ups left out: the timings of "
        r"onnx at batch 1 spread over \d+% of their median \(at most 50%\); export again on a "
        r"quieter machine, or with more latency.repeats",
        spread or "",
    )
    busy = latency_warning({"eager": steady, "onnx": steady}, 20, load=3.2, cores=2)
    assert "speed-ups left out: the load average is 3.2 on 2 cores; export again" in (busy or "")


def test_model_onnx_holds_no_node_metadata_nor_paths_of_this_machine(exported_run):
    # The exporter records each node's stack trace and module path; inference needs none of it.
    model = onnx.load(exported_run / "model.onnx")
    assert not any(node.metadata_props or node.doc_string for node in model.graph.node)
    assert str(ROOT).encode() not in (exported_run / "model.onnx").read_bytes()


# export.py acknowledges this once; here torch.jit is called directly, on purpose.
@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
def test_artifacts_reloaded_by_their_runtimes_match_the_eager_model(
    exported_run, trained_run, tmp_path
):
    best = trained_run / "checkpoints" / "best.ckpt"
    cfg = compose_config("export", tmp_path, [f"ckpt_path={best}"], quiet=False)
    options = validated(ExportOptions, cfg, newest_opset=onnx.defs.onnx_opset_version())
    net, samples, _ = load_net_and_samples(options, ALLOWED, None)
    assert not net.training  # Dropout off and BatchNorm on running statistics, as deployed

    model = exported_run / "model.onnx"
    assert onnx.load(model).graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    scripted = torch.jit.load(exported_run / "model.ts")
    program = torch.export.load(exported_run / "model.pt2").module()
    for size in (1, 5, 37):  # 5: a batch size none of them saw while exporting
        inputs = samples[:size]
        with torch.inference_mode():
            expected = net(inputs).numpy()
            outputs = [scripted(inputs).numpy(), program(inputs).numpy()]
        outputs.append(session.run(None, {"input": inputs.numpy()})[0])
        for output in outputs:
            assert output.shape == expected.shape
            np.testing.assert_allclose(output, expected, atol=1e-4, rtol=0)


def test_scripting_instead_of_tracing(trained_run, tmp_path):
    best = trained_run / "checkpoints" / "best.ckpt"
    overrides = [f"ckpt_path={best}", "formats=[torchscript]", "torchscript_method=script"]
    report = export(compose_config("export", tmp_path, [*overrides, *FAST_LATENCY], quiet=False))
    assert report["passed"]
    assert sorted(path.name for path in tmp_path.glob("model.*")) == ["model.ts"]
    assert read(tmp_path / "manifest.json")["opset"] is None  # no ONNX file, so no opset


@pytest.mark.slow  # an export.py process
def test_export_log_keeps_the_lines_the_export_printed(trained_run, tmp_path):
    best = trained_run / "checkpoints" / "best.ckpt"
    overrides = [f"ckpt_path={best}", "formats=[onnx]", *FAST_LATENCY, f"hydra.run.dir={tmp_path}"]
    result = run_cli("export.py", *overrides)
    assert result.returncode == 0, result.stderr
    # What the export printed, apart from log records that Hydra shows on the console.
    printed = [line for line in result.stdout.splitlines() if not line.startswith("[")]
    assert any(line.startswith("format ") and "max |diff|" in line for line in printed)
    assert printed[-1] == f"exported onnx to {tmp_path}"
    assert kept_in_log(tmp_path / "export.log") == printed
    assert "][{{ cookiecutter.package }}][" not in result.stdout  # and shown once, not twice


def test_parity_beyond_tolerance_fails_with_a_clear_line_and_no_manifest(trained_run, tmp_path):
    # onnxruntime fuses BatchNorm into the convolutions, so its logits differ in the last bits.
    best = trained_run / "checkpoints" / "best.ckpt"
    overrides = [f"ckpt_path={best}", "formats=[onnx]", "atol=0", *FAST_LATENCY]
    with pytest.raises(UserError, match="^onnx differs from the eager model by .*manifest"):
        export(compose_config("export", tmp_path, overrides, quiet=False))
    assert read(tmp_path / "report.json")["passed"] is False
    assert (tmp_path / "model.onnx").is_file()  # kept for inspection
    assert not (tmp_path / "manifest.json").exists()


def test_a_write_that_fails_leaves_the_previous_file_and_no_partial_one(tmp_path):
    (tmp_path / "model.onnx").write_bytes(b"previous export")
    with pytest.raises(RuntimeError), staged(tmp_path / "model.onnx") as partial:
        partial.write_bytes(b"half of a new export")
        raise RuntimeError("the exporter crashed")
    assert [path.name for path in tmp_path.iterdir()] == ["model.onnx"]
    assert (tmp_path / "model.onnx").read_bytes() == b"previous export"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "formats=[onnx,tflite]",
            "unknown format 'tflite' in formats; choose from onnx, torchscript, torch_export",
        ),
        ("torchscript_method=compile", "torchscript_method=compile is unknown; choose trace or"),
        ("ckpt_path=null", "export needs a checkpoint: pass ckpt_path="),
        (
            "formats=[torchscript,onnx_int8]",
            "onnx_int8 is made from model.onnx: add onnx to formats, e.g. "
            "formats=[onnx,onnx_int8]",
        ),
        (
            "formats=[triton]",
            "triton is made from model.onnx: add onnx to formats, e.g. formats=[onnx,triton]",
        ),
        (
            "triton.max_batch_size=0",
            "triton.max_batch_size=0 must be a whole number of at least 1",
        ),
        ("max_metric_drop=-1", "max_metric_drop=-1 must be a number of points, 0 or more"),
        ("calibration_samples=0", "calibration_samples=0 must be a whole number of at least 1"),
        ("formats=onnx", "formats=onnx must be a list of formats, e.g. formats=[onnx]"),
        ("formats=[]", "formats=[] must be a list of formats"),
        ("opset=5", "opset=5 must be a whole number from 18 (what torch's exporter writes)"),
        ("atol=abc", "atol=abc must be a number, 0 or more"),
        ("atol=inf", "atol=inf must be a number, 0 or more"),  # it would turn off the check
        ("formats=[onnx,torchscript,onnx]", "formats names onnx twice; name each format once"),
        ("latency.repeats=0", "latency.repeats=0 must be a whole number of at least 1"),
        # sysfs takes no new folders, from root either.
        ("output_dir=/sys/no-exports-here/x", "cannot write to /sys/no-exports-here: "),
        # Not the working directory, which is the project's own folder.
        ("output_dir=", "output_dir= names no folder; pass one, or leave output_dir out for"),
    ],
)
def test_bad_options_fail_before_any_work(override, message, tmp_path):
    cfg = compose_config("export", tmp_path, ["ckpt_path=unused.ckpt", override], quiet=False)
    with pytest.raises(UserError, match="^" + re.escape(message)):
        export(cfg)
    assert not list(tmp_path.iterdir())


def test_a_diverged_checkpoint_is_refused_in_one_line_before_anything_is_written(
    trained_run, tmp_path
):
    checkpoint = read_checkpoint(trained_run / "checkpoints" / "best.ckpt")
    for value in checkpoint["state_dict"].values():
        if value.is_floating_point():
            value.fill_(float("nan"))
    torch.save(checkpoint, tmp_path / "diverged.ckpt")
    overrides = [f"ckpt_path={tmp_path / 'diverged.ckpt'}", f"output_dir={tmp_path / 'export'}"]
    with pytest.raises(UserError, match="gives NaN or infinite outputs on the test samples"):
        export(compose_config("export", tmp_path / "run", overrides, quiet=False))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["diverged.ckpt"]


def checksums(folder) -> dict[str, str]:
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.iterdir())
        if path.is_file()
    }


def predicts(export_dir, tmp_path) -> bool:
    """Whether predict runs on the export (it checks the manifest's checksums first)."""
    inputs, _ = write_inputs(default_datamodule(tmp_path / "data"), tmp_path / "inputs", count=2)
    overrides = [f"model_path={export_dir}", f"input={inputs}"]
    return (
        len(predict(compose_config("predict", tmp_path / "predict", overrides, quiet=False))) == 2
    )


@pytest.fixture
def earlier_export(exported_run, tmp_path):
    """A copy of a good export, and the checksum of each of its files."""
    shutil.copytree(exported_run, tmp_path / "export")
    return tmp_path / "export", checksums(tmp_path / "export")


def test_a_failing_export_leaves_the_earlier_one_byte_identical(
    earlier_export, trained_run, tmp_path
):
    export_dir, before = earlier_export
    best = trained_run / "checkpoints" / "best.ckpt"
    overrides = [f"ckpt_path={best}", f"output_dir={export_dir}", "atol=0", *FAST_LATENCY]
    with pytest.raises(UserError, match=f"the earlier export in {re.escape(str(export_dir))} is"):
        export(compose_config("export", tmp_path / "run", overrides, quiet=False))
    assert checksums(export_dir) == before
    assert predicts(export_dir, tmp_path)
    assert read(export_dir.with_name("export.staging") / "report.json")["passed"] is False


@pytest.mark.slow  # an export.py process, interrupted
@pytest.mark.parametrize(
    "inherited", [signal.SIG_DFL, signal.SIG_IGN], ids=["ctrl-c-handled", "started-ignored"]
)
def test_ctrl_c_during_an_export_leaves_the_earlier_one_byte_identical(
    earlier_export, trained_run, tmp_path, inherited
):
    export_dir, before = earlier_export
    command = [
        sys.executable,
        str(ROOT / "export.py"),
        f"ckpt_path={trained_run / 'checkpoints' / 'best.ckpt'}",
        f"output_dir={export_dir}",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

    def start() -> None:  # SIG_IGN: as a shell starts a script's background job
        signal.signal(signal.SIGINT, inherited)

    popen = {"cwd": ROOT, "env": env, "stderr": subprocess.PIPE, "preexec_fn": start}
    with subprocess.Popen(command, **popen) as process:
        staging = export_dir.with_name("export.staging")
        while process.poll() is None and not list(staging.glob("model.*")):
            time.sleep(0.02)  # until the first new model file is being written
        process.send_signal(signal.SIGINT)
        process.wait(timeout=120)
    assert process.returncode != 0
    assert checksums(export_dir) == before
    assert predicts(export_dir, tmp_path)


def test_exporting_other_formats_leaves_no_file_the_new_manifest_does_not_describe(
    earlier_export, trained_run, tmp_path
):
    export_dir, _ = earlier_export
    # batch_sizes=[1]: torch.export still gets an example of two, so the batch stays dynamic.
    overrides = [
        f"ckpt_path={trained_run / 'checkpoints' / 'best.ckpt'}",
        f"output_dir={export_dir}",
        "formats=[torch_export]",
        "batch_sizes=[1]",
        *FAST_LATENCY,
    ]
    assert export(compose_config("export", tmp_path / "run", overrides, quiet=False))["passed"]
    manifest = read(export_dir / "manifest.json")
    assert sorted(path.name for path in export_dir.glob("model.*")) == ["model.pt2"]
    assert {entry["file"] for entry in manifest["formats"].values()} == {"model.pt2"}
    assert not export_dir.with_name("export.staging").exists()
