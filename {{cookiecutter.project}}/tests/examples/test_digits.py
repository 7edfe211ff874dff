"""Example quality on the digits, the default data as shipped: the default model's accuracy, and
predict.py's on raw digits and on their PNG files. Replace these with your own data's bar."""

import json

import numpy as np
from conftest import run_predict, save_pngs
from sklearn.datasets import load_digits


def test_the_default_model_reaches_97_percent_on_the_digits(digits_run):
    assert json.loads((digits_run / "metrics.json").read_text())["test/acc"] >= 0.97


def test_predict_recognizes_nine_in_ten_raw_digits_and_their_png_files(digits_export, tmp_path):
    digits = load_digits()
    images, labels = digits.images[:40].astype(np.float32), digits.target[:40]
    np.save(tmp_path / "digits.npy", images)
    save_pngs(images, tmp_path / "pngs")
    for name, source in (("array", tmp_path / "digits.npy"), ("files", tmp_path / "pngs")):
        predictions = run_predict(digits_export, source, tmp_path / name)
        hits = [int(p["class"]) == label for p, label in zip(predictions, labels, strict=True)]
        assert np.mean(hits) >= 0.9, name


def test_the_digits_export_describes_8x8_greyscale_digits_of_ten_classes(digits_export):
    manifest = json.loads((digits_export / "manifest.json").read_text())
    assert manifest["input"] == {
        "name": "input",
        "kind": "image",
        "shape": ["batch", 1, 8, 8],
        "dtype": "float32",
    }
    assert manifest["preprocessing"]["value_range"] == [0, 16]  # as load_digits() holds them
    assert manifest["target"]["class_names"] == [str(digit) for digit in range(10)]
