"""predict.py: onnxruntime and numpy only, on the raw samples of the default data (arrays or
table rows), on image files and folders; clear errors."""

import json
import os
import re
import shutil
import sys
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import (
    answers_agree,
    compose_config,
    eager_answers,
    error_lines,
    kept_in_log,
    png_claiming,
    run_cli,
    run_code,
    run_predict,
    save_pngs,
    trained_data,
    without_torch,
    write_inputs,
)
from PIL import Image
from servers import free_port
from sklearn.datasets import load_digits

from {{ cookiecutter.package }}.console import UserError
from {{ cookiecutter.package }}.tasks.predict import predict


@pytest.fixture(scope="module")
def samples(trained_run, tmp_path_factory) -> dict:
    """Test samples of the trained run's data as a user has them (raw image arrays in a .npy
    file, or table rows in a .csv file), and what the trained model answers for them."""
    model, datamodule = trained_data(trained_run)
    path, _ = write_inputs(datamodule, tmp_path_factory.mktemp("samples"))
    few, _ = write_inputs(datamodule, tmp_path_factory.mktemp("few"), count=3)
    return {"path": path, "few": few, "answers": eager_answers(model, datamodule, 40)}


def test_predict_runs_where_torch_cannot_be_imported(exported_run, samples, tmp_path):
    result = run_cli(
        "predict.py",
        f"model={exported_run}",
        f"input={samples['path']}",
        f"hydra.run.dir={tmp_path / 'run'}",
        env=without_torch(tmp_path / "blocker"),
    )
    assert result.returncode == 0, result.stderr
    predictions = json.loads((tmp_path / "run" / "predictions.json").read_text())["predictions"]
    count = len(samples["answers"])
    assert [p["index"] for p in predictions] == list(range(count))
    # From the raw samples, what the trained model itself (torch, eager) answers for them.
    assert answers_agree(predictions, samples["answers"])
    assert f"{samples['path'].name}[{count - 1}]" in result.stdout  # the printed table
    assert kept_in_log(tmp_path / "run" / "predict.log") == result.stdout.splitlines()


# What predict on an image file must not import: Hydra and pandas (and torch) take longer to
# import than the prediction takes.
NOT_FOR_AN_IMAGE = ["hydra", "omegaconf", "pandas", "torch", "pytorch_lightning"]


@pytest.mark.parametrize("form", ["png", "npy"])
def test_predict_on_images_imports_neither_hydra_nor_pandas_nor_for_arrays_pillow(
    digits_export, tmp_path, form
):
    images = load_digits().images[:1]
    if form == "png":
        [path] = save_pngs(images, tmp_path / "image")
        unneeded = NOT_FOR_AN_IMAGE
    else:
        np.save(path := tmp_path / "digit.npy", images)
        unneeded = [*NOT_FOR_AN_IMAGE, "PIL"]
    arguments = [f"model={digits_export}", f"input={path}", f"hydra.run.dir={tmp_path / 'run'}"]
    code = (
        "import json, sys\n"
        f"sys.argv = ['predict.py', *{arguments}]\n"
        "from {{ cookiecutter.package }}.cli import predict\n"
        "predict()\n"
        f"print(json.dumps([name for name in {unneeded} if name in sys.modules]))\n"
    )
    result = run_code(code)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == []
    [prediction] = json.loads((tmp_path / "run" / "predictions.json").read_text())["predictions"]
    assert prediction["file"] == str(path)


def test_plain_settings_and_hydra_give_the_same_run(digits_export, tmp_path):
    """The same prediction through the plain route and through Hydra (a quoted value is
    Hydra's): the same predictions, config and log, and each accepts the other's directory as
    a run of its own settings."""
    [image] = save_pngs(load_digits().images[:1], tmp_path / "image")
    settings = {"plain": f"input={image}", "hydra": f"input='{image}'"}
    runs = {route: tmp_path / route for route in settings}
    for route, setting in settings.items():
        result = run_cli("predict.py", f"model={digits_export}", setting, "top_k=2",
                         f"hydra.run.dir={runs[route]}")  # fmt: skip
        assert result.returncode == 0, result.stderr
    plain, hydra = runs["plain"], runs["hydra"]
    assert (hydra / ".hydra" / "hydra.yaml").is_file()  # it did run through Hydra
    assert not (plain / ".hydra" / "hydra.yaml").exists()
    for name in ["predictions.json", ".hydra/config.yaml"]:
        assert (plain / name).read_text() == (hydra / name).read_text()
    assert kept_in_log(plain / "predict.log") == kept_in_log(hydra / "predict.log")
    overrides = [f"model_path={digits_export}", f"input={image}", "top_k=2"]
    assert yaml.safe_load((plain / ".hydra" / "overrides.yaml").read_text()) == overrides
    for route, setting in settings.items():  # each in the other's directory
        other = hydra if route == "plain" else plain
        again = run_cli("predict.py", f"model={digits_export}", setting, "top_k=2",
                        f"hydra.run.dir={other}")  # fmt: skip
        assert again.returncode == 0, again.stderr
        changed = run_cli("predict.py", f"model={digits_export}", setting, "top_k=3",
                          f"hydra.run.dir={other}")  # fmt: skip
        assert error_lines(changed) == [
            f"error: {other} holds a run with other settings (top_k was 2, now 3): rerun it "
            "with its own settings to resume it, or choose a new hydra.run.dir"
        ]


def test_a_run_refused_before_it_wrote_anything_leaves_its_directory_to_the_next(
    digits_export, tmp_path
):
    """A run stopped by a bad setting left only its records and log: the corrected command
    takes its directory, by either route, and the log keeps both runs."""
    [image] = save_pngs(load_digits().images[:1], tmp_path / "image")
    for route, quote in {"plain": "", "hydra": "'"}.items():
        run_dir = tmp_path / route
        inputs = {"refused": tmp_path / "missing.png", "fixed": image}
        results = {
            name: run_cli(
                "predict.py",
                f"model={digits_export}",
                f"input={quote}{path}{quote}",
                f"hydra.run.dir={run_dir}",
            )
            for name, path in inputs.items()
        }
        assert results["refused"].returncode == 1
        assert results["fixed"].returncode == 0, results["fixed"].stderr
        [prediction] = json.loads((run_dir / "predictions.json").read_text())["predictions"]
        assert prediction["file"] == str(image)
        assert "missing.png' does not exist" in (run_dir / "predict.log").read_text()


def test_runs_that_start_in_the_same_second_each_get_a_directory_of_their_own(
    digits_export, tmp_path
):
    """Run directories are named by the second a run starts, and a loop of predict commands
    starts several in one: each run takes the next free name, `<time>_2` on, by either route,
    and writes nothing into a directory an earlier run holds."""
    [image] = save_pngs(load_digits().images[:1], tmp_path / "image")
    runs = tmp_path / "logs" / "predict" / "runs"  # paths.log_dir, in the working directory
    # Earlier runs hold the names of the next two minutes, as if started in the same seconds.
    now = datetime.now()
    for seconds in range(-1, 120):
        held = runs / (now + timedelta(seconds=seconds)).strftime("%Y-%m-%d_%H-%M-%S")
        (held / ".hydra").mkdir(parents=True)
        (held / ".hydra" / "config.yaml").write_text("task_name: train\n")
    settings = {"plain": f"input={image}", "hydra": f"input='{image}'"}  # quoted: Hydra's
    for setting in settings.values():
        for top_k in (1, 2):
            result = run_cli(
                "predict.py", f"model={digits_export}", setting, f"top_k={top_k}", cwd=tmp_path
            )
            assert result.returncode == 0, result.stderr
    written = sorted(path.parent for path in runs.glob("*/predictions.json"))
    assert len(written) == 4
    assert all(re.fullmatch(r".+_[0-9]+", folder.name) for folder in written)
    assert sum((folder / ".hydra" / "hydra.yaml").is_file() for folder in written) == 2
    assert all(len(list(folder.rglob("*"))) == 2 for folder in runs.glob("*-[0-9][0-9]"))


# Greyscale PNG files that hold exactly the digits' values: a known image dataset.
def test_image_files_and_folders_give_the_predictions_of_the_same_array(digits_export, tmp_path):
    images = load_digits().images[:12].astype(np.float32)
    folder = tmp_path / "images"
    save_pngs(images, folder)
    np.save(tmp_path / "digits.npy", images)

    from_array = run_predict(
        digits_export / "model.onnx", tmp_path / "digits.npy", tmp_path / "array"
    )
    from_folder = run_predict(digits_export, folder, tmp_path / "folder")
    from_file = run_predict(digits_export, folder / "03.png", tmp_path / "file")
    assert [p["class"] for p in from_folder] == [p["class"] for p in from_array]
    assert [p["file"] for p in from_folder] == [
        str(folder / f"{index:02}.png") for index in range(12)
    ]
    assert from_file == [from_folder[3]]


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS file systems take UTF-8 names only")
def test_an_image_named_in_another_encoding_is_predicted_and_printed_escaped(
    digits_export, tmp_path
):
    """A Latin-1 name (an archive made on another system) reaches Python as escapes, which a
    terminal whose encoding is strict, and the log file, cannot write as they are."""
    [image] = save_pngs(load_digits().images[:1], tmp_path / "images")
    latin = os.fsdecode(bytes(image.parent) + b"/caf\xe9.png")
    os.rename(image, latin)
    overrides = [f"model={digits_export}", f"input={image.parent}", f"hydra.run.dir={tmp_path}/r"]
    result = run_cli("predict.py", *overrides, env={"PYTHONIOENCODING": "utf-8:strict"})
    assert result.returncode == 0 and not result.stderr, result.stderr
    [prediction] = json.loads((tmp_path / "r" / "predictions.json").read_text())["predictions"]
    assert prediction["file"] == latin
    printed = f"{image.parent}/caf\\udce9.png"
    assert printed in result.stdout
    assert printed in (tmp_path / "r" / "predict.log").read_text()


def test_the_printed_table_lists_the_top_k_classes_of_each_sample(digits_export, tmp_path, capsys):
    np.save(tmp_path / "digits.npy", load_digits().images[:2].astype(np.float32))
    predicted = run_predict(digits_export, tmp_path / "digits.npy", tmp_path / "run", "top_k=3")
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    expected = []
    for index, prediction in enumerate(predicted):
        first, *others = [[e["class"], f"{e['probability']:.4f}"] for e in prediction["top"]]
        expected += [[f"{tmp_path / 'digits.npy'}[{index}]", *first], *others]
    assert rows == expected
    assert len(rows) == 6 and rows[0][1] == predicted[0]["class"]


def test_a_model_the_manifest_does_not_describe_is_refused(exported_run, samples, tmp_path):
    export_dir = tmp_path / "export"
    shutil.copytree(exported_run, export_dir)
    manifest = json.loads((export_dir / "manifest.json").read_text())
    manifest["formats"]["onnx"]["sha256"] = "0" * 64  # as if model.onnx came from another export
    (export_dir / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match="is not the model that .*manifest.json describes"):
        run_predict(export_dir, samples["path"], tmp_path / "run")


def test_a_damaged_model_is_refused_before_onnxruntime_reads_it(exported_run, samples, tmp_path):
    import onnx

    export_dir = shutil.copytree(exported_run, tmp_path / "export")
    model = onnx.load(export_dir / "model.onnx")
    model.graph.node[0].op_type = "NoSuchOperator"  # still a model, one onnxruntime cannot run
    onnx.save(model, export_dir / "model.onnx")
    with pytest.raises(UserError, match="is not the model that .*manifest.json describes"):
        run_predict(export_dir, samples["path"], tmp_path / "run")


def test_wrong_input_shape_gives_one_clear_line(exported_run, tmp_path):
    # Three samples of 5x7 values: neither an image of the model's nor rows of its table.
    np.save(tmp_path / "flat.npy", np.zeros((3, 5, 7), dtype=np.float32))
    result = run_cli(
        "predict.py",
        f"model={exported_run}",
        f"input={tmp_path / 'flat.npy'}",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert result.returncode == 1
    manifest = json.loads((exported_run / "manifest.json").read_text())
    if manifest["input"]["kind"] == "table":
        columns = [column["name"] for column in manifest["preprocessing"]["columns"]]
        expected = f"has shape (3, 5, 7); expected (N, {len(columns)}): the columns "
        expected += ", ".join(columns)
    elif manifest["input"]["kind"] == "text":
        expected = "holds float32 values of shape (3, 5, 7); expected texts"
    else:
        dims = ", ".join(map(str, manifest["input"]["shape"][1:]))
        expected = (
            f"has shape (3, 5, 7); expected (N, {dims}) or ({dims}): raw arrays are not "
            "resized, send image files for that"
        )
    line = f"error: {tmp_path / 'flat.npy'} {expected}"
    assert result.stderr.strip() == line
    assert not (tmp_path / "run" / "predictions.json").exists()


@pytest.mark.parametrize(
    ("model", "input", "message"),
    [
        # Arrays of words, and a file of no kind, for a model of the digits' raw values.
        ("{digits}", "{tmp}/words.npy", "holds <U5 values; expected raw values as numbers"),
        ("{digits}", "{tmp}/arrays.npy", "arrays.npy is not a .npy array; write one with numpy"),
        (
            "{export}",
            "{tmp}/missing.npy",
            "does not exist; pass input=<a file or folder of inputs, or a .npy array>",
        ),
        (
            "{digits}",
            "{digits}/manifest.json",
            # Each input kind names the files it reads, and the .npy array it takes too.
            "or a .npy array of raw",
        ),
        (
            "{export}/model.ts",
            "{tmp}/words.npy",
            "model.ts is not an ONNX model; expected the model.onnx that export.py writes",
        ),
        (
            "{tmp}",
            "{tmp}/words.npy",
            "is neither an .onnx file nor a folder with model.onnx; pass model=<export dir>",
        ),
        ("{tmp}/nowhere", "{tmp}/words.npy", "nowhere' does not exist; pass model=<export dir>"),
        (
            "{partial}",
            "{tmp}/words.npy",
            "partial lacks model.onnx, which its manifest lists; copy all of it or export again",
        ),
        (
            "{run}",
            "{tmp}/words.npy",
            "is a training run, not an export: export it first (python export.py ckpt_path="
            "{run}/checkpoints/best.ckpt), then pass model=<the export's folder>",
        ),
        (
            "{run}/checkpoints",
            "{tmp}/words.npy",
            "checkpoints' is a folder of checkpoints, not an export: export it first (python "
            "export.py ckpt_path={run}/checkpoints/best.ckpt)",
        ),
        (
            "{run}/checkpoints/best.ckpt",
            "{tmp}/words.npy",
            "best.ckpt' is a checkpoint, not an export: export it first",
        ),
    ],
    ids=[
        "dtype",
        "npz",
        "missing-input",
        "not-an-input",
        "not-onnx",
        "no-model",
        "no-such-model",
        "model-gone",
        "a-run",
        "its-checkpoints",
        "a-ckpt",
    ],
)
def test_bad_inputs_name_what_was_expected(
    exported_run, trained_run, digits_export, tmp_path, model, input, message
):
    np.save(tmp_path / "words.npy", np.array(["three", "seven"]))
    np.savez(tmp_path / "arrays.npz", np.zeros((2, 8, 8)))
    (tmp_path / "arrays.npz").rename(tmp_path / "arrays.npy")
    without_onnx = shutil.ignore_patterns("*.onnx")
    partial = shutil.copytree(exported_run, tmp_path / "partial", ignore=without_onnx)
    paths = {"export": exported_run, "tmp": tmp_path, "run": trained_run, "partial": partial}
    paths["digits"] = digits_export
    with pytest.raises(UserError, match=re.escape(message.format(**paths))):
        run_predict(model.format(**paths), input.format(**paths), tmp_path / "run")
    assert not (tmp_path / "run" / "predictions.json").exists()


def test_a_variant_the_export_lacks_is_one_line_naming_those_it_holds(
    exported_run, samples, tmp_path
):
    overrides = [f"model_path={exported_run}", f"input={samples['few']}", "variant=int8"]
    with pytest.raises(UserError) as error:
        predict(compose_config("predict", tmp_path / "run", overrides, quiet=False))
    assert str(error.value) == (
        f"variant=int8 is not an ONNX model of the export in {exported_run}; it holds fp32"
    )


def strict_json(path):
    """The file parsed as strict JSON: NaN and Infinity, which json.dumps writes by default and
    most parsers outside Python reject, fail the test."""

    def refuse(constant):
        raise AssertionError(f"{path} holds {constant}")

    return json.loads(path.read_text(), parse_constant=refuse)


# Raw image arrays, which have no missing values to impute: the digits'.
def test_non_finite_samples_are_refused_in_one_line_or_marked(digits_export, tmp_path):
    images = load_digits().images[:5].astype(np.float32)
    images[1, 0, 0], images[3, 4, 4] = np.nan, np.inf
    np.save(tmp_path / "broken.npy", images)
    overrides = [f"model_path={digits_export}", f"input={tmp_path / 'broken.npy'}"]
    refused = run_cli("predict.py", *overrides, f"hydra.run.dir={tmp_path / 'refused'}")
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        f"error: 2 samples hold NaN or infinite values ({tmp_path / 'broken.npy'}[1], "
        f"{tmp_path / 'broken.npy'}[3]); fix them, or pass invalid_inputs=mark to predict the "
        "others"
    )
    assert not (tmp_path / "refused" / "predictions.json").exists()

    marked = ["invalid_inputs=mark", *overrides]
    predict(compose_config("predict", tmp_path / "marked", marked, quiet=False))
    predictions = strict_json(tmp_path / "marked" / "predictions.json")["predictions"]
    assert [p["index"] for p in predictions] == [0, 1, 2, 3, 4]
    assert [p.get("invalid") for p in predictions] == [
        None,
        "NaN or infinite values",
        None,
        "NaN or infinite values",
        None,
    ]
    assert all(0 < p["probability"] <= 1 for p in predictions if "invalid" not in p)


def edited_export(exported_run, tmp_path, edit) -> Path:
    export_dir = tmp_path / "export"
    shutil.copytree(exported_run, export_dir)
    manifest = json.loads((export_dir / "manifest.json").read_text())
    edit(manifest)
    (export_dir / "manifest.json").write_text(json.dumps(manifest))
    return export_dir


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.pop("target"), "manifest.json: target: Field required; export again"),
        (
            lambda m: m.pop("preprocessing"),
            "manifest.json: preprocessing: Field required; export again",
        ),
        (lambda m: m["input"].update(shape=["batch", 3, 8, 8]), "declares inputs of shape"),
        (
            lambda m: m["target"]["class_names"].pop(),
            "describes a classification of 9 outputs, the model has 10",
        ),
        (
            lambda m: m["preprocessing"].update(std=[0.0]),
            "normalization std [0.0]; it must be positive",
        ),
        (
            lambda m: m["preprocessing"].pop("mean"),
            "manifest.json: preprocessing.mean: Field required; export again",
        ),
        (
            lambda m: m["preprocessing"].update(image_size=16),
            "prepares images of shape [1, 16, 16], the model takes [1, 8, 8]",
        ),
        (
            lambda m: m["preprocessing"].update(mean=[0.0, 0.0]),
            "needs one mean and one std per channel (1)",
        ),
    ],
    ids=["no-target", "no-preprocessing", "shape", "classes", "std", "no-mean", "size", "means"],
)
def test_a_manifest_that_does_not_fit_its_model_is_one_line(
    digits_export, tmp_path, edit, message
):
    # The digits' manifest: the edits name its shapes and classes.
    export_dir = edited_export(digits_export, tmp_path, edit)
    np.save(tmp_path / "digits.npy", load_digits().images[:3])
    with pytest.raises(UserError, match=re.escape(message)) as error:
        run_predict(export_dir, tmp_path / "digits.npy", tmp_path / "run")
    assert "\n" not in str(error.value)


def shifted_mean(manifest: dict) -> None:
    manifest["preprocessing"]["mean"] = [mean + 1.0 for mean in manifest["preprocessing"]["mean"]]


@pytest.mark.slow  # two processes per case
@pytest.mark.parametrize(
    "edit",
    [lambda m: m["target"]["class_names"].reverse(), shifted_mean],
    ids=["classes-reordered", "mean-changed"],
)
def test_an_edited_manifest_is_refused_by_predict_and_serve(digits_export, tmp_path, edit):
    """Edits that every other check accepts, and that would change every prediction."""
    export_dir = edited_export(digits_export, tmp_path, edit)
    np.save(tmp_path / "digits.npy", load_digits().images[:3])
    commands = {
        "predict.py": [f"input={tmp_path / 'digits.npy'}"],
        "serve.py": [f"port={free_port()}"],
    }
    for script, overrides in commands.items():
        run = tmp_path / script
        result = run_cli(script, f"model={export_dir}", *overrides, f"hydra.run.dir={run}")
        assert result.returncode == 1 and "Traceback" not in result.stderr, script
        assert error_lines(result) == [
            f"error: {export_dir / 'manifest.json'} was edited after export: its input, "
            "preprocessing or target no longer match the digest recorded for model.onnx; "
            "export again"
        ], script
        assert not (run / "predictions.json").exists()


@pytest.mark.parametrize("size", [(10_000, 10_000), (20_000, 20_000)], ids=["limit", "twice"])
def test_an_image_that_claims_a_huge_size_is_refused_in_one_line(digits_export, tmp_path, size):
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(png_claiming(*size))
    run = tmp_path / "run"
    overrides = [f"model={digits_export}", f"input={bomb}", f"hydra.run.dir={run}"]
    result = run_cli("predict.py", *overrides)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: {bomb} claims more than {Image.MAX_IMAGE_PIXELS} pixels (a damaged file, or one "
        "made to exhaust memory); shrink or remove it"
    ]
    assert not (run / "predictions.json").exists()


def test_an_output_dir_that_is_a_file_is_one_line(exported_run, samples, tmp_path):
    (tmp_path / "taken").write_text("not a folder\n")
    overrides = [
        f"model_path={exported_run}",
        f"input={samples['few']}",
        f"output_dir={tmp_path / 'taken'}",
    ]
    with pytest.raises(UserError, match="is a file; pass a folder for predictions.json"):
        predict(compose_config("predict", tmp_path / "run", overrides, quiet=False))
    assert (tmp_path / "taken").read_text() == "not a folder\n"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("input=null", "predict needs model=<export dir> and input=<.npy, .csv, .parquet"),
        ("top_k=0", "top_k=0 must be a whole number of at least 1"),
        ("top_k=true", "top_k=True must be a whole number of at least 1"),
        ("invalid_inputs=skip", "invalid_inputs=skip is unknown; choose error or mark"),
        # Not the working directory, which is the project's own folder.
        ("output_dir=", "output_dir= names no folder; pass one, or leave output_dir out for"),
    ],
)
def test_bad_options_are_one_line_before_the_export_is_read(override, message, tmp_path):
    overrides = [f"model_path={tmp_path / 'no-export'}", "input=digits.npy", override]
    with pytest.raises(UserError) as error:
        predict(compose_config("predict", tmp_path / "run", overrides, quiet=False))
    assert str(error.value).startswith(message) and "\n" not in str(error.value)
