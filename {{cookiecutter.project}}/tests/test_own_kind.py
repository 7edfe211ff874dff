"""An input kind of the user's own, written as the README says (a module in kinds/, a
datamodule for it and its config), trains, exports, predicts, serves and has a page, with no
other file changed: the registry finds it by name, and nothing else branches on the kind. One
that lacks part of the interface is named in one line."""

import json

import pytest
from conftest import QUIET, copy_project, run_cli, unchanged_but
from servers import Server, call

PACKAGE = "{{ cookiecutter.package }}"
KIND = '''"""Points in the plane, x and y, standardized per coordinate. numpy only."""

import numpy as np
from pydantic import BaseModel

from ..console import UserError
from ..contract import Preprocessing as BasePreprocessing
from . import Number, arrays

REQUEST = 'points: send {"inputs": [[x, y], ...]} or {"rows": [{"x": ..., "y": ...}]}'
UPLOAD = None
DTYPE = "float32"


class Preprocessing(BasePreprocessing):
    mean: list[float]
    std: list[float]


def input_shape(preprocessing):
    return [2]


def files(preprocessing):
    return {}


def fit(points):
    return Preprocessing(mean=points.mean(0).tolist(), std=points.std(0).tolist())


def encode(points, preprocessing):
    return ((points - preprocessing.mean) / np.float32(preprocessing.std)).astype(np.float32)


def from_arrays(array, preprocessing, source):
    if array.ndim != 2 or array.shape[1:] != (2,):
        raise UserError(f"{source} has shape {array.shape}; expected (N, 2)")
    return encode(array.astype(np.float32), preprocessing)


def read_inputs(path, preprocessing):
    points = np.loadtxt(path, ndmin=2)  # one point per line
    sources = [{"file": str(path), "index": index} for index in range(len(points))]
    return from_arrays(points, preprocessing, str(path)), sources


def from_json(payload, preprocessing):
    rows = payload.get("rows")
    points = [[row.get("x"), row.get("y")] for row in rows] if rows else payload["inputs"]
    return from_arrays(np.asarray(points, dtype=np.float32), preprocessing, "the request")


class Point(BaseModel):
    x: Number
    y: Number


def json_forms(preprocessing):
    return {"inputs": arrays((None, 2)), "rows": list[Point]}


def form(preprocessing):
    fields = [{"name": name, "kind": "numeric"} for name in ("x", "y")]
    return {"type": "fields", "fields": fields, "about": "Input: a point in the plane."}


def check(preprocessing, shape, where):
    if shape != [2] or len(preprocessing.mean) != 2:
        raise UserError(f"{where} describes points, the model takes {shape}")
'''
DATAMODULE = '''"""Two interleaving half circles of points, scikit-learn's moons."""

import torch
from sklearn.datasets import make_moons

from PACKAGE.data.base import ContractDataModule
from PACKAGE.data.loaders import InMemoryDataset
from PACKAGE.kinds import points
from PACKAGE.targets import classification


class MoonsDataModule(ContractDataModule):
    kind = "points"

    def __init__(self, samples: int = 600, **common):
        super().__init__(**common)

    def read(self):
        inputs, labels = make_moons(self.hparams.samples, noise=0.1, random_state=0)
        self.split(len(inputs))
        return inputs.astype("float32"), labels

    def fit(self, samples):
        inputs, _ = samples
        preprocessing = points.fit(inputs[self.indices["train"]])
        return self.declare(preprocessing, classification.fit(["first", "second"]))

    def apply(self, samples, contract):
        inputs, labels = samples
        inputs = torch.from_numpy(points.encode(inputs, contract.preprocessing))
        labels = torch.from_numpy(labels)
        return {
            name: InMemoryDataset(inputs[index], labels[index])
            for name, index in self.indices.items()
        }
'''.replace("PACKAGE", PACKAGE)
CONFIG = f"""_target_: {PACKAGE}.data.moons.MoonsDataModule
samples: 600
num_features: null
num_classes: null
batch_size: 32
"""
ADDED = [
    f"src/{PACKAGE}/kinds/points.py",
    f"src/{PACKAGE}/data/moons.py",
    "configs/data/moons.yaml",
]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    copy = copy_project(tmp_path_factory.mktemp("own_kind") / "project")
    for name, text in zip(ADDED, (KIND, DATAMODULE, CONFIG), strict=True):
        (copy / name).write_text(text)
    return copy


@pytest.mark.slow  # training, export and prediction, each its own process
def test_an_own_input_kind_trains_exports_predicts_and_has_a_page(project, tmp_path):
    runs = tmp_path / "runs"

    def cli(script, *overrides):
        done = run_cli(script, *overrides, f"hydra.run.dir={runs / script[:-3]}", root=project)
        assert done.returncode == 0, done.stderr[-3000:]

    # The project's models declare networks for images and tables: the user picks one. The moons
    # are two classes: the classifier, whatever model the default data needs.
    moons = ["data=moons", "model=classifier", "model/net=mlp"]
    cli("train.py", *QUIET, *moons, "trainer.max_epochs=5")
    metrics = json.loads((runs / "train" / "metrics.json").read_text())
    assert metrics["test/acc"] > 0.8  # the moons separate well; a broken kind would not learn
    cli("export.py", f"ckpt_path={runs / 'train' / 'checkpoints' / 'best.ckpt'}", "formats=[onnx]")
    manifest = json.loads((runs / "export" / "manifest.json").read_text())
    assert manifest["input"]["kind"] == "points" and manifest["input"]["shape"] == ["batch", 2]
    assert set(manifest["preprocessing"]) == {"mean", "std"}

    # Points on the first moon (label 0) and on the second.
    (tmp_path / "points.txt").write_text("-1.0 0.0\n0.0 1.0\n1.0 -0.5\n2.0 0.5\n")
    cli("predict.py", f"model={runs / 'export'}", f"input={tmp_path / 'points.txt'}")
    predicted = json.loads((runs / "predict" / "predictions.json").read_text())["predictions"]
    assert [p["class"] for p in predicted] == ["first", "first", "second", "second"]

    # The page asks for what the kind's form describes.
    (tmp_path / "page.py").write_text(
        "import sys\nfrom pathlib import Path\n"
        f"from {PACKAGE}.inference import load_export\nfrom {PACKAGE}.serving import page\n"
        "print(page(load_export(Path(sys.argv[1]))[1]))\n"
    )
    shown = run_cli(str(tmp_path / "page.py"), str(runs / "export"), root=project)
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert '"fields": [{"name": "x", "kind": "numeric"}' in shown.stdout

    # Served: the kind's JSON forms, raw points and rows of fields as the page sends them.
    (tmp_path / "server").mkdir()
    with Server(runs / "export", tmp_path / "server", root=project) as server:
        for body in (
            {"inputs": [[-1.0, 0.0], [2.0, 0.5]]},
            {"rows": [{"x": -1, "y": 0}, {"x": 2, "y": 0.5}]},
        ):
            answer = call("POST", f"{server.url}/predict", json=body)
            assert answer.status == 200, answer.text
            assert [p["class"] for p in answer.json()["predictions"]] == ["first", "second"]
    assert unchanged_but(project, ADDED)


def test_a_kind_that_lacks_part_of_its_interface_is_named_in_one_line(project, tmp_path, request):
    half = project / "src" / PACKAGE / "kinds" / "half.py"
    # Without json_forms, form and check, and from_json misnamed.
    half.write_text(KIND.split("class Point")[0].replace("def from_json(", "def from_body("))
    request.addfinalizer(half.unlink)  # the module's other tests find the project as they made it
    (tmp_path / "get.py").write_text(
        f"from {PACKAGE} import kinds\nfrom {PACKAGE}.console import UserError\n"
        "try:\n    kinds.get('half')\nexcept UserError as error:\n    print(error)\n"
    )
    shown = run_cli(str(tmp_path / "get.py"), root=project)
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert shown.stdout.strip() == (
        "input kind 'half' (kinds/half.py) lacks from_json, json_forms, form, check: "
        "kinds/__init__.py says what each one is"
    )
