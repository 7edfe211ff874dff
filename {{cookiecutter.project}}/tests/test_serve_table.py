"""serve.py on a table model over HTTP, with a real server and client: rows in, the values
predict.py gives for the same rows of the CSV file out, and bad rows refused in one line."""

import json
import re
import shutil

import pandas as pd
import pytest
from conftest import FAST_LATENCY, compose_config, error_lines, made_once, run_cli, run_predict
from servers import Server, Upload, call

from {{ cookiecutter.package }}.console import UserError
from {{ cookiecutter.package }}.inference import load_export

# Slow: a server of several processes. One worker runs the module, which starts it once.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def table_export(example_data, tmp_path_factory):
    """A regression of the wine table's alcohol, briefly trained and exported: its columns hold
    numbers, text (colour, cultivar) and gaps."""
    from {{ cookiecutter.package }}.tasks.export import export
    from {{ cookiecutter.package }}.tasks.train import train

    def train_and_export(folder):
        data = ["data=table", f"data.path={example_data['wine']}", "data.target=alcohol"]
        run = folder / "run"
        train(compose_config("train", run, [*data, "model=regressor", "trainer.max_epochs=3"]))
        best = run / "checkpoints" / "best.ckpt"
        overrides = [f"ckpt_path={best}", "formats=[onnx]", *FAST_LATENCY]  # batches of up to 64
        export(compose_config("export", folder / "export", overrides, quiet=False))

    return made_once(tmp_path_factory, "table_export", train_and_export) / "export"


@pytest.fixture(scope="module")
def server(table_export, tmp_path_factory):
    with Server(table_export, tmp_path_factory.mktemp("serve")) as server:
        yield server


def post(server, **options):
    return call("POST", f"{server.url}/predict", **options)


def test_rows_get_the_values_predict_py_gives_for_the_csv(server, table_export, example_data):
    path = example_data["wine"]
    expected = run_predict(table_export, path, path.parent / "predicted")
    rows = json.loads(pd.read_csv(path).to_json(orient="records"))  # gaps as null
    assert any(value is None for row in rows for value in row.values())
    answer = post(server, json={"rows": rows})
    assert answer.status == 200, answer.text
    assert answer.json()["predictions"] == [{"value": p["value"]} for p in expected]
    one = post(server, json={"rows": [{**rows[5], "unused column": "ignored"}]})
    assert one.json()["predictions"] == [{"value": expected[5]["value"]}]
    # A boolean where the model takes a number, as a CSV's column of True and False trains it.
    flags = [{**rows[5], "hue": flag} for flag in (True, False, 1.0, 0.0)]
    values = [p["value"] for p in post(server, json={"rows": flags}).json()["predictions"]]
    assert values[:2] == values[2:] and values[0] != values[1]
    info = call("GET", f"{server.url}/info").json()
    assert info["task"] == "regression" and info["classes"] is None
    page = call("GET", f"{server.url}/").text
    assert '"type": "fields"' in page and '{"name": "colour", "kind": "categorical"' in page


def test_a_test_split_smaller_than_a_batch_is_repeated_to_fill_it(table_export):
    report = json.loads((table_export / "report.json").read_text())
    assert report["passed"]
    assert set(report["results"]["onnx"]["parity"]) == {"1", "37", "64"}  # of 27 test rows


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda spec: spec.update(std=0.0),
            "preprocessing column 'malic_acid' std 0.0; it must be positive",
        ),
        (lambda spec: spec.pop("fill"), ".numeric.fill: Field required; export again"),
        (lambda spec: spec.update(kind="ordinal"), "does not match any of the expected tags"),
    ],
    ids=["std", "fill", "kind"],
)
def test_a_table_manifest_that_cannot_prepare_rows_is_one_line(
    table_export, tmp_path, edit, message
):
    export_dir = tmp_path / "export"
    shutil.copytree(table_export, export_dir)
    manifest = json.loads((export_dir / "manifest.json").read_text())
    (spec,) = [c for c in manifest["preprocessing"]["columns"] if c["name"] == "malic_acid"]
    edit(spec)
    (export_dir / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match=re.escape(message)) as error:
        load_export(export_dir)
    assert "\n" not in str(error.value)


def test_a_value_beyond_float32_in_a_csv_is_refused_in_one_line(
    table_export, example_data, tmp_path
):
    rows = pd.read_csv(example_data["wine"]).head(3)
    rows.loc[1, "malic_acid"] = 1e300  # finite in the file, infinite as the model's float32
    rows.to_csv(tmp_path / "rows.csv", index=False)
    result = run_cli(
        "predict.py",
        f"model={table_export}",
        f"input={tmp_path / 'rows.csv'}",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert result.returncode == 1
    assert "Warning" not in result.stderr and "Traceback" not in result.stderr
    (line,) = error_lines(result)
    assert "NaN or infinite" in line and result.stderr.strip().splitlines() == [line]
    assert not (tmp_path / "run" / "predictions.json").exists()


def infinite(row: dict) -> dict:
    """A body whose hue is 1e999, which JSON parsers read as infinity."""
    text = json.dumps({"rows": [{**row, "hue": 7.0}]}).replace("7.0", "1e999")
    return {"data": text, "headers": {"Content-Type": "application/json"}}


BAD_ROWS = {
    # name: (the request, from a good row; status; what the reason says)
    "missing column": (
        lambda row: {"json": {"rows": [{"malic_acid": 1.7}]}},
        422,
        "rows has no column 'ash'; its columns: malic_acid",
    ),
    "text": (
        lambda row: {"json": {"rows": [{**row, "hue": "pale"}]}},
        422,
        "rows: column 'hue' holds text; the model was trained on numbers there",
    ),
    "some text": (
        lambda row: {"json": {"rows": [row, {**row, "hue": "pale"}]}},
        422,
        "rows: column 'hue' holds numbers and text such as 'pale'; fix them: the model was "
        "trained on numbers there",
    ),
    "list": (lambda row: {"json": {"rows": [{**row, "hue": [1]}]}}, 422, "a list of objects"),
    "infinite": (infinite, 422, "sample 0 holds NaN or infinite values"),
    "no rows": (lambda row: {"json": {"rows": []}}, 422, "rows holds no rows; send at least one"),
    "not objects": (lambda row: {"json": {"rows": [[1, 2]]}}, 422, "a list of objects"),
    "image": (lambda row: {"data": Upload(b"\x89PNG")}, 415, "this model takes table rows"),
}


@pytest.mark.parametrize(("request_of", "status", "reason"), BAD_ROWS.values(), ids=BAD_ROWS)
def test_bad_rows_get_a_4xx_with_one_line(server, example_data, request_of, status, reason):
    row = json.loads(pd.read_csv(example_data["wine"]).head(1).to_json(orient="records"))[0]
    answer = post(server, **request_of(row))
    assert answer.status == status, answer.text
    assert reason in answer.json()["detail"] and "\n" not in answer.text
    assert post(server, json={"rows": [row]}).status == 200
