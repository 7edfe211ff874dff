"""The pipeline for every datamodule and task: train, resume, eval, export and predict, run for
each shipped data config on the example data (and a regression on the example table), or for
your own with `pytest tests/test_pipeline.py --data=<name of configs/data/NAME.yaml>`.

Framework tests: they check that the pieces agree with each other, not how well a model learns
(tests/examples/ does that). One test per case walks the whole pipeline, so that each case is
trained once."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    ALLOWED,
    FAST_LATENCY,
    SHORT,
    compose_config,
    contract_of,
    example_overrides,
    suited_model,
)

from {{ cookiecutter.package }}.builders import build_trained
from {{ cookiecutter.package }}.checkpoints import load_checkpoint
from {{ cookiecutter.package }}.data.images import ImageFiles
from {{ cookiecutter.package }}.kinds import model_shape
from {{ cookiecutter.package }}.kinds.table import read_table  # tables of texts too
from {{ cookiecutter.package }}.tasks.eval import evaluate
from {{ cookiecutter.package }}.tasks.export import export
from {{ cookiecutter.package }}.tasks.predict import predict
from {{ cookiecutter.package }}.tasks.train import train


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def case_overrides(case: str, request, folder: Path) -> list[str]:
    """`data=<name>` (and the model) of a case, pointed at the example data for a shipped one;
    a config given with --data is used as it is, with a model for its task."""
    if request.config.getoption("data"):
        return [f"data={case}", *suited_model(case, folder)]
    paths = request.getfixturevalue("example_data")
    return [f"data={case.split('+')[0]}", *example_overrides(case, paths)]


def raw_test_split(datamodule, folder: Path) -> tuple[Path, np.ndarray]:
    """The test split as a user would hand it to predict (image files, rows of a table or of
    texts, or raw arrays), and its targets in the order predict reads them."""
    dataset, contract = datamodule.splits["test"], contract_of(datamodule)
    if isinstance(dataset, ImageFiles):
        # Numbered copies, so that predict reads them in the split's order.
        folder.mkdir()
        for position, file in enumerate(dataset.files):
            shutil.copy(file, folder / f"{position:05}{file.suffix}")
        return folder, np.asarray(dataset.labels)
    targets = dataset.targets.numpy()
    if contract["input"]["kind"] in ("table", "text"):
        rows = read_table(Path(datamodule.hparams.path)).iloc[datamodule.indices["test"]]
        rows.to_csv(folder.with_suffix(".csv"), index=False)
        return folder.with_suffix(".csv"), targets
    # Images held in memory: back to the raw values the dataset stores.
    preprocessing = contract["preprocessing"]
    mean, std = (np.float32(preprocessing[key]).reshape(-1, 1, 1) for key in ("mean", "std"))
    np.save(folder.with_suffix(".npy"), dataset.inputs.numpy() * std + mean)
    return folder.with_suffix(".npy"), targets


def assert_predictions_score_like_eval(predictions, targets, target: dict, evaluated: dict):
    if target["task"] == "regression":
        true = targets * target["std"] + target["mean"]
        values = np.array([prediction["value"] for prediction in predictions])
        r2 = 1 - ((true - values) ** 2).sum() / ((true - true.mean()) ** 2).sum()
        assert r2 == pytest.approx(evaluated["test/r2"], abs=1e-4)
    else:
        names = np.array(target["class_names"])[targets]
        hits = [p["class"] == name for p, name in zip(predictions, names, strict=True)]
        assert np.mean(hits) == pytest.approx(evaluated["test/acc"], abs=1e-6)


# The resume writes to a run folder of its own on purpose: Lightning says it starts the
# checkpoint callback's records afresh there.
@pytest.mark.filterwarnings("ignore:The dirpath has changed from")
def test_train_resume_eval_export_and_predict_agree(pipeline_case, request, tmp_path):
    overrides = case_overrides(pipeline_case, request, tmp_path / "data")
    train(compose_config("train", tmp_path / "train", [*overrides, *SHORT]))
    checkpoints = tmp_path / "train" / "checkpoints"
    best = checkpoints / "best.ckpt"

    # Resume: the epoch count goes on from last.ckpt.
    resumed = [
        *overrides,
        *SHORT,
        "trainer.max_epochs=3",
        f"ckpt_path={checkpoints / 'last.ckpt'}",
    ]
    train(compose_config("train", tmp_path / "resumed", [*resumed, "test=false"]))
    assert load_checkpoint(tmp_path / "resumed" / "checkpoints" / "last.ckpt")["epoch"] == 2

    # eval, from the checkpoint alone, gives the run's own test metrics.
    evaluated = evaluate(compose_config("eval", tmp_path / "eval", [f"ckpt_path={best}"]))
    tested = {k: v for k, v in read(tmp_path / "train" / "metrics.json").items() if "test/" in k}
    assert tested and {k: evaluated[k] for k in tested} == pytest.approx(tested, abs=1e-6)

    # The data contract travels from the datamodule to the checkpoint to the manifest.
    export_overrides = [f"ckpt_path={best}", "formats=[onnx]", *FAST_LATENCY]
    assert export(compose_config("export", tmp_path / "export", export_overrides, quiet=False))[
        "passed"
    ]
    manifest = read(tmp_path / "export" / "manifest.json")
    contract = load_checkpoint(best)["config"]["contract"]
    _, datamodule = build_trained(best, ALLOWED)
    datamodule.setup("test")
    assert contract_of(datamodule) == contract
    assert manifest["preprocessing"] == contract["preprocessing"]
    assert manifest["target"] == contract["target"]
    assert manifest["task"] == contract["target"]["task"]
    shape = model_shape(contract["input"]["kind"], contract["input"]["shape"])
    assert manifest["input"]["shape"] == ["batch", *shape]

    # predict, on the raw test split and without torch's preprocessing, scores as eval does.
    source, targets = raw_test_split(datamodule, tmp_path / "test-split")
    predict_overrides = [f"model_path={tmp_path / 'export'}", f"input={source}"]
    predictions = predict(
        compose_config("predict", tmp_path / "predict", predict_overrides, quiet=False)
    )
    assert_predictions_score_like_eval(predictions, targets, contract["target"], evaluated)
