"""A LightningModule of the user's own, written in the two files the README names, trains,
evaluates, exports, predicts and serves on every data config, with no other file changed; a
checkpoint naming a module that no setting allows is refused in one line, and allowed by
configuration, never by the checkpoint."""

import json
import shutil

import pandas as pd
import pytest
import torch
from conftest import (
    ALLOWED,
    DIGITS,
    QUIET,
    chance,
    contract_of,
    copy_project,
    default_datamodule,
    error_lines,
    example_overrides,
    read_checkpoint,
    run_cli,
    unchanged_but,
    write_inputs,
)
from servers import Server, call

PACKAGE = "{{ cookiecutter.package }}"
# The user's two files, named as no project of a user's would name its own; nothing else in
# the project changes.
NAME = "own_module_check"
ADDED = [f"src/{PACKAGE}/models/{NAME}.py", f"configs/model/{NAME}.yaml"]
# A module unlike the project's: no shared base, its own training step and metric names, and
# made for both tasks (data with a number to predict has num_classes None).
MODULE = '''"""Multinomial logistic regression with an L2 penalty, judged by its error rate; for a
number to predict, linear regression, judged by 1 - R²."""

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import R2Score
from torchmetrics.classification import MulticlassAccuracy


class TinyModule(pl.LightningModule):
    def __init__(self, in_features, num_classes, lr=0.1, penalty=1e-4, monitor="val/error",
                 mode="min"):
        super().__init__()
        self.linear = nn.Linear(in_features, num_classes or 1)
        self.lr, self.penalty, self.classes = lr, penalty, num_classes
        self.score = nn.ModuleDict({
            stage: MulticlassAccuracy(num_classes, average="micro") if num_classes else R2Score()
            for stage in ("val", "test")
        })

    def forward(self, x):
        if not x.is_floating_point():  # token ids: their counts, hashed into in_features slots
            counts = x.new_zeros(x.shape[0], self.linear.in_features, dtype=torch.float32)
            x = counts.scatter_add(1, x % self.linear.in_features, (x != 0).float()).log1p()
        return self.linear(x.flatten(1))

    def outputs(self, x):  # class logits, or the one number without its axis
        return self(x) if self.classes else self(x).squeeze(1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        fit = F.cross_entropy if self.classes else F.mse_loss
        loss = fit(self.outputs(x), y) + self.penalty * self.linear.weight.square().sum()
        self.log("train/penalized_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        self.score["val"].update(self.outputs(batch[0]), batch[1])

    def test_step(self, batch, batch_idx):
        self.score["test"].update(self.outputs(batch[0]), batch[1])

    def on_validation_epoch_end(self):
        self.log("val/error", 1 - self.score["val"].compute())
        self.score["val"].reset()

    def on_test_epoch_end(self):
        self.log("test/error", 1 - self.score["test"].compute())
        self.score["test"].reset()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)
'''
CONFIG = (
    f"_target_: {PACKAGE}.models.{NAME}.TinyModule\n"
    + """in_features: ${data.num_features}
num_classes: ${data.num_classes}
lr: 0.1
# What checkpoints, early stopping and sweeps watch, and which way is better.
monitor: val/error
mode: min
"""
)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A copy of the project with the user's two files added."""
    copy = copy_project(tmp_path_factory.mktemp("own") / "project")
    (copy / "src" / PACKAGE / "models" / f"{NAME}.py").write_text(MODULE)
    (copy / "configs" / "model" / f"{NAME}.yaml").write_text(CONFIG)
    return copy


def cli(project, script, *overrides):
    return run_cli(script, *overrides, root=project)


@pytest.mark.slow  # training, evaluation, export and prediction, each its own process
def test_an_own_module_trains_evaluates_exports_and_predicts_on_any_data(
    project, data_overrides, tmp_path
):
    runs = tmp_path / "runs"
    trained = cli(
        project,
        "train.py",
        *QUIET,
        f"model={NAME}",
        *data_overrides,
        "trainer.max_epochs=3",
        f"hydra.run.dir={runs / 'train'}",
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    metrics = json.loads((runs / "train" / "metrics.json").read_text())
    # Fewer errors than always answering the most frequent class (or the mean): it learned.
    datamodule = default_datamodule(tmp_path / "data", data_overrides)
    assert metrics["test/error"] < 1 - chance(datamodule, "test")
    assert metrics["val/error"] < 1 - chance(datamodule, "val")
    # What sweeps optimize, `<monitor>_best`, though the module does not log it.
    assert metrics["val/error_best"] <= metrics["val/error"]
    best = runs / "train" / "checkpoints" / "best.ckpt"
    recorded = read_checkpoint(best)["config"]["model"]["_target_"]
    assert recorded == f"{PACKAGE}.models.{NAME}.TinyModule"

    evaluated = cli(
        project, "eval.py", *QUIET[:1], f"ckpt_path={best}", f"hydra.run.dir={runs / 'eval'}"
    )
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    eval_metrics = json.loads((runs / "eval" / "metrics.json").read_text())
    assert eval_metrics["test/error"] == pytest.approx(metrics["test/error"], abs=1e-6)

    exported = cli(
        project,
        "export.py",
        f"ckpt_path={best}",  # every default format
        "latency.repeats=3",
        # A linear layer over 3,072 pixel values sums more float32 rounding than the default
        # tolerance allows: this test is about the module plugging in, not about precision.
        "atol=1e-3",
        f"hydra.run.dir={runs / 'export'}",
    )
    assert exported.returncode == 0, exported.stderr[-3000:]
    report = json.loads((runs / "export" / "report.json").read_text())
    assert report["passed"] and {"onnx", "torchscript", "torch_export"} <= set(report["results"])
    samples, _ = write_inputs(datamodule, tmp_path / "samples", count=2)
    predicted = cli(
        project,
        "predict.py",
        f"model={runs / 'export'}",
        f"input={samples}",
        f"hydra.run.dir={runs / 'predict'}",
    )
    assert predicted.returncode == 0, predicted.stderr[-3000:]
    predictions = json.loads((runs / "predict" / "predictions.json").read_text())["predictions"]
    task = contract_of(datamodule)["target"]["task"]
    answer = {"classification": "class", "regression": "value"}[task]
    assert predictions and all(answer in prediction for prediction in predictions)
    assert unchanged_but(project, ADDED)


@pytest.mark.slow  # training, export and prediction, each its own process
def test_an_own_module_predicts_numbers_on_a_regression_table(project, example_data, tmp_path):
    data = ["data=table", f"data.path={example_data['diabetes']}", "data.target=progression"]
    runs = tmp_path / "runs"
    best = runs / "train" / "checkpoints" / "best.ckpt"
    for script, overrides in (
        ("train.py", [*QUIET, f"model={NAME}", *data, "trainer.max_epochs=3"]),
        ("export.py", [f"ckpt_path={best}", "formats=[onnx]"]),
    ):
        done = cli(project, script, *overrides, f"hydra.run.dir={runs / script[:-3]}")
        assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((runs / "train" / "metrics.json").read_text())
    datamodule = default_datamodule(tmp_path / "data", data)
    assert metrics["test/error"] < 1 - chance(datamodule, "test")  # better than the mean
    rows = tmp_path / "rows.csv"
    table = pd.read_csv(example_data["diabetes"]).drop(columns="progression")
    table.head(3).to_csv(rows, index=False)
    predicted = cli(
        project, "predict.py", f"model={runs / 'export'}", f"input={rows}",
        f"hydra.run.dir={runs / 'predict'}",
    )  # fmt: skip
    assert predicted.returncode == 0, predicted.stderr[-3000:]
    predictions = json.loads((runs / "predict" / "predictions.json").read_text())["predictions"]
    assert [type(prediction["value"]) for prediction in predictions] == [float] * 3


@pytest.mark.slow  # a training process each
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (  # a metric it does not log: found at the first validation, before a checkpoint reads it
            ["model.monitor=val/acc"],
            "error: EarlyStopping watches val/acc, which the model does not log; set "
            "model.monitor to one it logs: ",
        ),
        (  # a config without monitor, which the callbacks read
            ["~model.monitor"],
            "error: the config reads ${model.monitor}, which no config sets: set model.monitor "
            "in its config, or pass +model.monitor=<value>",
        ),
        (  # a key its __init__ does not take
            ["+model.dropout=0.5"],
            "error: TinyModule.__init__() got an unexpected keyword argument 'dropout': the keys "
            "of a config are the arguments of the class it names",
        ),
    ],
    ids=["unlogged-monitor", "no-monitor", "unknown-argument"],
)
def test_an_own_module_s_config_mistakes_are_one_line(project, overrides, message, tmp_path):
    run = tmp_path / "run"
    result = cli(  # a module of classes, on the digits' whatever the default data
        project, "train.py", *QUIET, *DIGITS, f"model={NAME}", "trainer.max_epochs=1", *overrides,
        f"hydra.run.dir={run}",
    )  # fmt: skip
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    (line,) = error_lines(result)
    assert line.startswith(message)
    if "does not log" in message:  # the metrics it does log, to choose from
        assert "val/error" in line.split(": ")[-1].split(", ")
    assert not (run / "metrics.json").exists()


@pytest.mark.slow  # a training process
def test_a_module_made_for_classes_on_numbers_to_predict_is_one_line(project, tmp_path, request):
    # Its config reads ${data.num_classes}, which is None for such data: a layer of None outputs.
    add_module(project, "classes", MODULE.replace("num_classes or 1", "num_classes"), request)
    run = tmp_path / "run"
    result = cli(
        project, "train.py", *QUIET, *DIGITS, "model=classes", "data.task=regression",
        "trainer.max_epochs=1", f"hydra.run.dir={run}",
    )  # fmt: skip
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert error_lines(result) == [
        "error: TinyModule (num_classes: ${data.num_classes}) failed to build for data 'digit', "
        "a regression target, which has no classes: pass model=regressor, or "
        "data.task=classification to read it as class labels"
    ]
    assert not (run / "metrics.json").exists()


# Modules that lack a part, or that skip batches: each variant of MODULE, and what the commands
# that need the part say (train, then eval or export where training went through).
VARIANTS = {
    "no-monitor-argument": (
        MODULE.replace(', monitor="val/error",\n                 mode="min"):', "):"),
        "train.py",
        "error: TinyModule.__init__() got an unexpected keyword argument 'monitor': the keys of "
        "a config are the arguments of the class it names; a model's include monitor and mode",
    ),
    "no-optimizer": (
        MODULE.split("    def configure_optimizers")[0],
        "train.py",
        "error: Lightning refuses the model: No `configure_optimizers()` method defined.",
    ),
    "no-validation-step": (
        MODULE.replace("def validation_step(", "def unused_validation_step("),
        "train.py",
        "error: EarlyStopping watches val/error, which the model does not log (TinyModule "
        "defines no validation_step); set model.monitor to one it logs: ",
    ),
    "no-test-step": (
        MODULE.replace("def test_step(", "def unused_test_step("),
        "eval.py",
        "error: TinyModule defines no test_step, which eval runs: give it one that logs its "
        "test metrics",
    ),
    "no-forward": (
        MODULE.replace("def forward(", "def logits(").replace("self(", "self.logits("),
        "export.py",
        "error: TinyModule defines no forward, which is what an export holds: give it "
        "forward(self, x) returning its outputs (class logits, or the predicted number)",
    ),
    "forward-returns-a-tuple": (
        MODULE.replace("return self.linear(x.flatten(1))", "return self.linear(x.flatten(1)), x")
        .replace("self(x)", "self(x)[0]")
        .replace("self(batch[0])", "self(batch[0])[0]"),
        "export.py",
        "error: TinyModule.forward returns a tuple, and an export holds one tensor: return the "
        "outputs alone (class logits, or the predicted number) and compute the rest in another "
        "method",
    ),
    "skips-batches": (
        MODULE.replace("return loss\n", "return loss if batch_idx % 2 == 0 else None\n"),
        None,
        None,
    ),
}


@pytest.mark.slow  # a training process, and an evaluation or export
@pytest.mark.parametrize("variant", VARIANTS)
def test_a_module_without_a_part_is_told_which_in_one_line(project, variant, tmp_path, request):
    source, script, message = VARIANTS[variant]
    add_module(project, "variant", source, request)
    run = tmp_path / "train"
    overrides = [*QUIET, *DIGITS, "model=variant", "trainer.max_epochs=2", f"hydra.run.dir={run}"]
    trained = cli(project, "train.py", *overrides)
    if script == "train.py":
        assert trained.returncode == 1
        (line,) = error_lines(trained)
        assert line.startswith(message)
        assert "Traceback" not in trained.stderr
        return
    assert trained.returncode == 0, trained.stderr[-3000:]
    metrics = json.loads((run / "metrics.json").read_text())
    tested = any(name.startswith("test/") for name in metrics)
    assert tested == (variant != "no-test-step")
    if not tested:
        assert "note: TinyModule defines no test_step: trained, not tested" in trained.stdout
    if variant == "skips-batches":  # the curve of the steps it took
        assert (run / "plots" / "loss.png").is_file()
    if script is not None:
        best = run / "checkpoints" / "best.ckpt"
        result = cli(project, script, f"ckpt_path={best}", f"hydra.run.dir={tmp_path / 'next'}")
        assert result.returncode == 1
        assert error_lines(result) == [message]
        assert "Traceback" not in result.stderr


@pytest.mark.slow  # a training and an evaluation, each its own process
def test_a_checkpoint_whose_module_is_gone_says_so(project, tmp_path, request):
    module = add_module(project, "gone", MODULE, request)
    run = tmp_path / "train"
    overrides = [*QUIET, *DIGITS, "model=gone", "trainer.max_epochs=1", f"hydra.run.dir={run}"]
    trained = cli(project, "train.py", *overrides)
    assert trained.returncode == 0, trained.stderr[-3000:]
    module.unlink()  # moved or deleted since training
    best = run / "checkpoints" / "best.ckpt"
    result = cli(project, "eval.py", f"ckpt_path={best}", f"hydra.run.dir={tmp_path / 'eval'}")
    assert result.returncode == 1
    assert error_lines(result) == [
        f"error: {best} was trained with '{PACKAGE}.models.gone.TinyModule' "
        f"(config.model._target_), which cannot be imported here (No module named "
        f"'{PACKAGE}.models.gone'): restore the code it was trained with"
    ]


def add_module(project, name: str, source: str, request):
    """The user's module `name` and its config `model=<name>`, in the project until the test
    ends: the module's other tests find the project as they made it."""
    module = project / "src" / PACKAGE / "models" / f"{name}.py"
    config = project / "configs" / "model" / f"{name}.yaml"
    module.write_text(source)
    config.write_text(CONFIG.replace(f"models.{NAME}.", f"models.{name}."))
    request.addfinalizer(lambda: (module.unlink(missing_ok=True), config.unlink()))
    return module


@pytest.mark.slow  # a server with its worker processes
def test_an_own_module_serves_a_table(project, example_data, tmp_path):
    data = example_overrides("table", example_data)
    runs = tmp_path / "runs"
    best = runs / "train" / "checkpoints" / "best.ckpt"
    for script, overrides in (
        ("train.py", [*QUIET, f"model={NAME}", "data=table", *data, "trainer.max_epochs=2"]),
        ("export.py", [f"ckpt_path={best}", "formats=[onnx]"]),  # the server runs model.onnx
    ):
        done = cli(project, script, *overrides, f"hydra.run.dir={runs / script[:-3]}")
        assert done.returncode == 0, done.stderr[-3000:]
    row = pd.read_csv(example_data["breast_cancer"]).drop(columns="diagnosis").iloc[0]
    (tmp_path / "server").mkdir()
    with Server(runs / "export", tmp_path / "server", root=project) as server:
        # to_json: a missing value goes as null, as JSON has no NaN.
        answer = call("POST", f"{server.url}/predict", json={"rows": [json.loads(row.to_json())]})
        assert answer.status == 200, answer.text
        assert answer.json()["predictions"][0]["class"] in ("benign", "malignant")
    assert unchanged_but(project, ADDED)


@pytest.mark.slow  # two evaluations, each its own process
def test_a_module_no_setting_allows_is_refused_until_configured(
    project, trained_run, tmp_path, request, score
):
    # The user's module placed outside the allowed modules, and a checkpoint that names it.
    elsewhere = project / "src" / PACKAGE / "experimental"
    elsewhere.mkdir()
    # Gone again when the test ends: the module's other tests find the project as they made it.
    request.addfinalizer(lambda: shutil.rmtree(elsewhere))
    shutil.copy(project / "src" / PACKAGE / "models" / "nets.py", elsewhere / "nets.py")
    checkpoint = read_checkpoint(trained_run / "checkpoints" / "best.ckpt")
    # The trained network's class, copied as it is (models/nets.py defines the CNN and MLP).
    name = checkpoint["config"]["model"]["net"]["_target_"].rsplit(".", 1)[1]
    target = f"{PACKAGE}.experimental.nets.{name}"
    checkpoint["config"]["model"]["net"]["_target_"] = target
    torch.save(checkpoint, tmp_path / "elsewhere.ckpt")
    overrides = [*QUIET[:1], f"ckpt_path={tmp_path / 'elsewhere.ckpt'}"]

    refused = cli(project, "eval.py", *overrides, f"hydra.run.dir={tmp_path / 'refused'}")
    assert refused.returncode == 1
    assert error_lines(refused) == [
        f"error: refusing {tmp_path / 'elsewhere.ckpt'}: config.model.net._target_ is "
        f"'{target}', not a class of an allowed module; if you trust this checkpoint, add its "
        f"module to allowed_targets in configs/allowed_targets.yaml (now: {', '.join(ALLOWED)})"
    ]
    assert "Traceback" not in refused.stderr

    allowed = f"allowed_targets=[{','.join([*ALLOWED, f'{PACKAGE}.experimental'])}]"
    accepted = cli(project, "eval.py", *overrides, allowed, f"hydra.run.dir={tmp_path / 'ok'}")
    assert accepted.returncode == 0, accepted.stderr[-3000:]
    trained = json.loads((trained_run / "metrics.json").read_text())[f"test/{score}"]
    evaluated = json.loads((tmp_path / "ok" / "metrics.json").read_text())[f"test/{score}"]
    assert evaluated == pytest.approx(trained, abs=1e-6)
