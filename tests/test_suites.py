"""The renders' own suites pass, run as their users run them: the default render's whole suite;
and its machinery tests with a user's own data as the default, a table CSV of classes or of a
number to predict, or a folder of images, named by configs/data/mine.yaml and made the default
in configs/train.yaml with the model for its task, as the render's README says.

Each suite has a worker per core of its own: this module is one pytest-xdist unit
(pyproject.toml's --dist loadfile), so they run one after another on one worker while the
other takes the rest of the template's tests. The longest comes first."""

import re

import numpy as np
import pytest
from conftest import render, run_in
from PIL import Image
from sklearn.datasets import load_diabetes, load_digits, load_wine


@pytest.mark.slow
def test_default_project_test_suite_passes(default_project):
    result = run_in(
        default_project,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--durations=15",
        timeout=2400,  # a guard against a hang only: the suite took over 15 minutes on 2 cores
    )
    summary = result.stdout.strip().splitlines()[-1]
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert re.search(r"\d+ passed", summary), summary
    # Quiet: every warning's cause removed, or filtered with its reason beside the filter.
    assert not re.search(r"failed|skipped|error|warning", summary), result.stdout[-6000:]
    print(result.stdout[-2500:])  # the slowest tests, for the CI log


def make_default(project, data_config: str, model: str) -> None:
    """configs/data/mine.yaml, made the default as the README shows, with `model`."""
    (project / "configs" / "data" / "mine.yaml").write_text(data_config)
    train = project / "configs" / "train.yaml"
    text = train.read_text()
    assert "  - data: digits\n" in text and "  - model: classifier\n" in text
    text = text.replace("  - data: digits\n", "  - data: mine\n")
    train.write_text(text.replace("  - model: classifier\n", f"  - model: {model}\n"))


def write_wine(folder) -> str:
    """Three cultivars of 178 wines: 13 measurements each, the class by name."""
    frame = load_wine(as_frame=True).frame
    names = {0: "barolo", 1: "grignolino", 2: "barbera"}
    frame = frame.rename(columns={"target": "cultivar"}).replace({"cultivar": names})
    path = folder / "wine.csv"
    frame.to_csv(path, index=False)
    return f"defaults: [table, _self_]\npath: {path}\ntarget: cultivar\n"


def write_diabetes(folder) -> str:
    """The progression of 442 patients' diabetes after a year, from ten measurements: a number."""
    frame = load_diabetes(as_frame=True).frame.rename(columns={"target": "progression"})
    path = folder / "diabetes.csv"
    frame.to_csv(path, index=False)
    return f"defaults: [table, _self_]\npath: {path}\ntarget: progression\n"


def write_images(folder) -> str:
    """Four classes of 60 colour images of 20x20 pixels, one folder per class: nothing shaped
    like the example's 8x8 greyscale digits of ten classes."""
    digits = load_digits()
    for name, label in (("zero", 0), ("one", 1), ("two", 2), ("three", 3)):
        (folder / "images" / name).mkdir(parents=True)
        for index, image in enumerate(digits.images[digits.target == label][:60]):
            grey = np.round(image * 255 / 16).astype(np.uint8)
            rgb = np.stack([grey, 255 - grey, grey // 2], axis=-1)
            picture = Image.fromarray(rgb).resize((20, 20), Image.Resampling.BILINEAR)
            picture.save(folder / "images" / name / f"{index:02}.png")
    return f"defaults: [images, _self_]\nroot: {folder / 'images'}\nimage_size: 20\n"


@pytest.mark.slow  # a render and its machinery tests, for each kind of data and task
@pytest.mark.parametrize(
    ("write", "model"),
    [(write_wine, "classifier"), (write_diabetes, "regressor"), (write_images, "classifier")],
    ids=["table", "regression", "images"],
)
def test_the_machinery_tests_pass_with_the_users_data_as_the_default(write, model, tmp_path):
    project = render(tmp_path / "render")
    make_default(project, write(tmp_path), model)
    result = run_in(
        project,
        "-m",
        "pytest",
        "-m",
        "not slow",
        "--ignore=tests/examples",
        "-q",
        "-p",
        "no:cacheprovider",
        "-n",
        "2",
        "--durations=5",
        timeout=2400,  # a guard against a hang only: on 2 busy cores it took over 20 minutes
    )
    summary = result.stdout.strip().splitlines()[-1]
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert re.search(r"\d+ passed", summary), summary
    assert not re.search(r"failed|skipped|error|warning", summary), result.stdout[-6000:]
    print(result.stdout[-1500:])  # the slowest tests, for the CI log
