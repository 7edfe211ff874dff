"""Writes three tables that ship with scikit-learn as CSV files, the input `data=table` reads:

    python scripts/example_tables.py <folder>
    python train.py data=table data.path=<folder>/breast_cancer.csv data.target=diagnosis
    python train.py data=table data.path=<folder>/wine.csv data.target=cultivar
    python train.py data=table data.path=<folder>/diabetes.csv data.target=progression \
      model=regressor

breast_cancer.csv: 569 tumours, 30 measurements, diagnosis "malignant" or "benign".
wine.csv: 178 wines, 13 measurements, cultivar "class_0" to "class_2", and a categorical
column, colour ("pale", "medium", "deep", from the colour intensity). A few measurements of
each are left empty, as in real tables. diabetes.csv: 442 patients, 10 measurements (age, sex,
body mass index, blood pressure, six blood serum values; scaled as scikit-learn ships them) and
progression, a measure of the disease one year after the baseline: a regression target.
Offline and deterministic.
"""

from pathlib import Path

import numpy as np
import pandas as pd
from example_folder import folder_argument  # beside this script
from sklearn.datasets import load_breast_cancer, load_diabetes, load_wine


def with_gaps(frame: pd.DataFrame, columns: list[str], share: float, seed: int) -> pd.DataFrame:
    """The frame with `share` of the values of `columns` removed at random."""
    random = np.random.default_rng(seed)
    for column in columns:
        frame.loc[random.random(len(frame)) < share, column] = np.nan
    return frame


def write(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    cancer = load_breast_cancer(as_frame=True)
    table = cancer.data.copy()
    table["diagnosis"] = cancer.target_names[cancer.target]
    with_gaps(table, ["mean texture", "worst smoothness"], 0.03, seed=0)

    wine = load_wine(as_frame=True)
    wines = wine.data.copy()
    wines["colour"] = pd.cut(
        wines.pop("color_intensity"), [0, 3.5, 7, np.inf], labels=["pale", "medium", "deep"]
    ).astype(str)
    wines["cultivar"] = wine.target_names[wine.target]
    with_gaps(wines, ["magnesium", "colour"], 0.03, seed=1)

    diabetes = load_diabetes(as_frame=True)
    patients = diabetes.data.copy()
    patients["progression"] = diabetes.target

    paths = [folder / "breast_cancer.csv", folder / "wine.csv", folder / "diabetes.csv"]
    for frame, path in zip((table, wines, patients), paths, strict=True):
        frame.to_csv(path, index=False)
    return paths


if __name__ == "__main__":
    for path in write(folder_argument(__doc__)):
        print(f"wrote {path}")
