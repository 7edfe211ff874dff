"""A task of the user's own, written as the README says (a module in targets/, with a
datamodule that declares it and a LightningModule that learns it), trains, evaluates, exports,
predicts and serves, with no other file changed: the registry finds it by name, and nothing
else branches on the task."""

import json

import numpy as np
import pytest
from conftest import QUIET, copy_project, run_cli, unchanged_but
from servers import Server, call
from sklearn.datasets import load_digits

PACKAGE = "{{ cookiecutter.package }}"
# A yes-or-no question from one logit: the answer and its probability.
TASK = '''"""Yes or no, from one logit whose sigmoid is the probability of yes. numpy only."""

import numpy as np
from pydantic import BaseModel

from ..contract import Target as BaseTarget

COLUMNS = ["answer", "probability"]
HINT = "train it with a module of one output, model=binary"


class Target(BaseTarget):
    task: str = "binary"
    question: str
    yes: list[int]


def fit(question, yes):
    return Target(question=question, yes=list(yes))


class Prediction(BaseModel):
    answer: bool
    probability: float


def encode(values, target):
    return np.isin(np.asarray(values), target.yes).astype(np.float32)


def outputs(target):
    return 1


def decode(outputs, target, top_k=1):
    yes = 1 / (1 + np.exp(-outputs[:, 0].astype(np.float64)))
    return [{"answer": bool(p > 0.5), "probability": round(float(max(p, 1 - p)), 6)} for p in yes]


def metric(outputs, targets):
    return {"test/acc": float(((outputs[:, 0] > 0) == (targets > 0.5)).mean())}


def parity(outputs, expected):
    return {"answer_agreement": float(((outputs[:, 0] > 0) == (expected[:, 0] > 0)).mean())}


def rows(prediction):
    return [[str(prediction["answer"]), f"{prediction['probability']:.4f}"]]
'''
DATAMODULE = '''"""The digits, asked whether each is odd."""

from PACKAGE.data.digits import DigitsDataModule
from PACKAGE.kinds import image
from PACKAGE.targets import binary


class OddDigitsDataModule(DigitsDataModule):
    def fit(self, samples):
        train = samples[0][self.indices["train"]]
        preprocessing = image.fit(image.pixel_moments(train), 1, 8, [0, 16])
        return self.declare(preprocessing, binary.fit("odd", [1, 3, 5, 7, 9]))
'''.replace("PACKAGE", PACKAGE)
MODULE = '''"""One logit, for a yes-or-no question."""

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn


class BinaryModule(pl.LightningModule):
    def __init__(self, in_features, lr=0.01, monitor="val/loss", mode="min"):
        super().__init__()
        self.save_hyperparameters()
        layers = [nn.Flatten(), nn.Linear(in_features, 64), nn.ReLU(), nn.Linear(64, 1)]
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)

    def step(self, batch, stage):
        logits, yes = self(batch[0])[:, 0], batch[1]
        loss = F.binary_cross_entropy_with_logits(logits, yes)
        accuracy = ((logits > 0) == (yes > 0.5)).float().mean()
        self.log_dict({f"{stage}/loss": loss, f"{stage}/acc": accuracy})
        return loss

    def training_step(self, batch, batch_idx):
        return self.step(batch, "train")

    def validation_step(self, batch, batch_idx):
        self.step(batch, "val")

    def test_step(self, batch, batch_idx):
        self.step(batch, "test")

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
'''
DATA_CONFIG = f"""defaults: [digits, _self_]
_target_: {PACKAGE}.data.odd_digits.OddDigitsDataModule
num_classes: null
"""
MODEL_CONFIG = (
    f"_target_: {PACKAGE}.models.binary.BinaryModule\n"
    + """in_features: ${data.num_features}
monitor: val/loss
mode: min
"""
)
ADDED = {
    f"src/{PACKAGE}/targets/binary.py": TASK,
    f"src/{PACKAGE}/data/odd_digits.py": DATAMODULE,
    "configs/data/odd_digits.yaml": DATA_CONFIG,
    f"src/{PACKAGE}/models/binary.py": MODULE,
    "configs/model/binary.yaml": MODEL_CONFIG,
}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    copy = copy_project(tmp_path_factory.mktemp("own_task") / "project")
    for name, text in ADDED.items():
        (copy / name).write_text(text)
    return copy


@pytest.mark.slow  # training, evaluation, export, prediction and a server, each its own process
def test_an_own_task_trains_evaluates_exports_predicts_and_serves(project, tmp_path):
    runs = tmp_path / "runs"

    def cli(script, *overrides):
        done = run_cli(script, *overrides, f"hydra.run.dir={runs / script[:-3]}", root=project)
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    cli("train.py", *QUIET, "data=odd_digits", "model=binary", "trainer.max_epochs=5")
    trained = json.loads((runs / "train" / "metrics.json").read_text())
    assert trained["test/acc"] > 0.8  # odd and even digits part well; a broken task would not
    best = runs / "train" / "checkpoints" / "best.ckpt"
    cli("eval.py", f"ckpt_path={best}")
    evaluated = json.loads((runs / "eval" / "metrics.json").read_text())
    assert evaluated["test/acc"] == pytest.approx(trained["test/acc"], abs=1e-6)

    cli("export.py", f"ckpt_path={best}", "formats=[onnx]")
    manifest = json.loads((runs / "export" / "manifest.json").read_text())
    assert manifest["target"] == {"task": "binary", "question": "odd", "yes": [1, 3, 5, 7, 9]}
    report = json.loads((runs / "export" / "report.json").read_text())
    assert report["passed"]  # the task's own parity check among the export's
    assert all(c["answer_agreement"] == 1.0 for c in report["results"]["onnx"]["parity"].values())

    digits = load_digits()
    np.save(tmp_path / "digits.npy", digits.images[:40])
    printed = cli("predict.py", f"model={runs / 'export'}", f"input={tmp_path / 'digits.npy'}")
    assert "answer" in printed.stdout and "probability" in printed.stdout  # the task's COLUMNS
    predicted = json.loads((runs / "predict" / "predictions.json").read_text())["predictions"]
    answers = [prediction["answer"] for prediction in predicted]
    assert np.mean(np.array(answers) == (digits.target[:40] % 2 == 1)) > 0.8

    (tmp_path / "server").mkdir()
    with Server(runs / "export", tmp_path / "server", root=project) as server:
        body = {"inputs": digits.images[:40].tolist()}
        answer = call("POST", f"{server.url}/predict", json=body)
        assert answer.status == 200, answer.text
        assert [p["answer"] for p in answer.json()["predictions"]] == answers
        schema = call("GET", f"{server.url}/openapi.json").json()["components"]["schemas"]
        assert set(schema["Prediction"]["properties"]) == {"answer", "probability"}
    assert unchanged_but(project, list(ADDED))
