"""Image files, one subfolder per class: `python train.py data=images data.root=<folder>`."""

import math
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from pytorch_lightning.utilities import rank_zero_only
from torch.utils.data import Dataset

from ..console import UserError, show
from ..preprocess import (
    IMAGE_SUFFIXES,
    classification_target,
    encode_target,
    image_contract,
    image_values,
    normalization,
    normalize,
    open_image,
    pixel_moments,
    regression_target,
)
from .base import SPLITS, ContractDataModule


def random_box(width: int, height: int, crop_scale, crop_ratio) -> tuple[float, ...]:
    """A random part of the image: `crop_scale` of its area, of aspect ratio within
    `crop_ratio` (width / height); the whole image if no such part fits in ten tries."""
    for _ in range(10):
        area = width * height * random.uniform(*crop_scale)
        ratio = math.exp(random.uniform(*map(math.log, crop_ratio)))
        w, h = math.sqrt(area * ratio), math.sqrt(area / ratio)
        if w <= width and h <= height:
            left, top = random.uniform(0, width - w), random.uniform(0, height - h)
            return left, top, left + w, top + h
    return 0, 0, width, height


@rank_zero_only  # once, not once per DDP process
def note(message: str) -> None:
    show(f"note: {message}")


class ImageFiles(Dataset):
    """Image files, each read when a batch needs it (in the DataLoader's worker processes),
    resized and normalized as `preprocessing` says; augmented when `augment` is given."""

    def __init__(self, files: list[Path], labels: list[int], preprocessing: dict, augment=None):
        self.files, self.labels = files, labels
        self.preprocessing, self.augment = preprocessing, augment or {}

    def __len__(self) -> int:
        return len(self.files)

    def unaugmented(self) -> "ImageFiles":
        return ImageFiles(self.files, self.labels, self.preprocessing)

    def __getitem__(self, index: int):
        image = open_image(self.files[index], self.preprocessing["channels"])
        box = None
        if self.augment.get("crop_scale"):
            box = random_box(*image.size, self.augment["crop_scale"], self.augment["crop_ratio"])
        raw = image_values(image, self.preprocessing, box)
        if self.augment.get("flip") and random.random() < 0.5:
            raw = raw[..., ::-1]
        return torch.from_numpy(normalize(raw, self.preprocessing)), self.labels[index]


def image_files(folder: Path) -> list[Path]:
    """The image files below `folder`; hidden files and folders and other files left out."""
    return sorted(
        path
        for path in folder.rglob("*")
        if path.suffix.lower() in IMAGE_SUFFIXES
        and not any(part.startswith(".") for part in path.relative_to(folder).parts)
        and path.is_file()
    )


def class_folders(folder: Path) -> dict[str, list[Path]]:
    """Each class subfolder's image files, by class name."""
    classes = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise UserError(
            f"{folder} holds no class subfolders; put each class's images in a subfolder named "
            "after the class"
        )
    files = {path.name: image_files(path) for path in classes}
    for name, found in files.items():
        if not found:
            raise UserError(
                f"{folder / name} holds no images ({', '.join(IMAGE_SUFFIXES)}); add some or "
                "remove the folder"
            )
    return files


def find_images(root: Path) -> dict[str, dict[str, list[Path]]]:
    """{"train": ..., "val": ..., "test": ...} from subfolders so named, else {"all": ...}."""
    given = [name for name in SPLITS if (root / name).is_dir()]
    if not given:
        return {"all": class_folders(root)}
    if len(given) < len(SPLITS):
        missing = ", ".join(f"{name}/" for name in SPLITS if name not in given)
        raise UserError(
            f"{root} has {', '.join(f'{name}/' for name in given)} but no {missing}: give all "
            "of train/, val/ and test/, or only class subfolders to split at random"
        )
    groups = {name: class_folders(root / name) for name in SPLITS}
    for name in ("val", "test"):
        unknown = sorted(set(groups[name]) - set(groups["train"]))
        if unknown:
            raise UserError(f"{root / name / unknown[0]} is a class that {root / 'train'} lacks")
    return groups


def check_numbers(root: Path, folders: list[str]) -> None:
    for name in folders:
        try:
            float(name)
        except ValueError:
            raise UserError(
                f"{root / name} is not named by a number: with data.task=regression each folder "
                "holds the images of one value and is named by it (e.g. 21/, 22.5/)"
            ) from None


class ImagesDataModule(ContractDataModule):
    """Image files of any size and format, greyscale or colour, one subfolder per class (or
    train/, val/ and test/ folders of class subfolders), resized to `image_size`."""

    def __init__(
        self,
        root: str | None = None,
        channels: int = 3,
        image_size: int = 64,
        augment: dict | None = None,
        skip_unreadable: bool = False,
        task: str = "classification",
        units: str | None = None,
        **common,
    ):
        super().__init__(channels=channels, image_size=image_size, **common)

    def read(self):
        root = self.hparams.root
        if not root or not Path(root).is_dir():
            wrong = f"data.root={root} is not a folder" if root else "data=images needs data.root"
            raise UserError(
                f"{wrong}; pass data.root=<folder with a subfolder of images per class>"
            )
        groups = find_images(Path(root))
        folders = sorted(next(iter(groups.values())))
        if self.hparams.task == "regression":
            check_numbers(Path(root), folders)
        else:
            self.check_classes(root, folders)
        # (group, file, folder name) of every image; its group is "all" or the split it is in.
        samples = [
            (group, file, name)
            for group, classes in groups.items()
            for name, files in classes.items()
            for file in files
        ]
        # A trained model's own size and channels, when it is evaluated on these images.
        shape = self.fitted(
            "input", lambda: {"shape": [self.hparams.channels, self.hparams.image_size]}
        )
        channels, size = shape["shape"][:2]
        # Files hold 0..255; the model sees them as 0..1 before normalization.
        preprocessing = {"channels": channels, "image_size": size, "value_range": [0, 1]}
        moments = self.check_files([file for _, file, _ in samples], preprocessing)
        samples = [sample for sample, m in zip(samples, moments, strict=True) if m is not None]
        moments = [m for m in moments if m is not None]
        if "all" in groups:
            self.split(len(samples))
        else:
            groups = np.array([group for group, _, _ in samples])
            self.indices = {name: np.flatnonzero(groups == name) for name in SPLITS}
        stats = self.fitted(
            "preprocessing",
            lambda: normalization(sum(moments[index] for index in self.indices["train"])),
        )
        names = pd.Series([name for _, _, name in samples])
        target = self.fitted("target", lambda: self.fit_target(folders, names))
        labels = encode_target(names, target)
        contract = image_contract(channels, size, preprocessing["value_range"], stats, target)
        splits = {
            name: ImageFiles(
                [samples[i][1] for i in index],
                labels[index],
                contract["preprocessing"],
                self.hparams.augment if name == "train" else None,
            )
            for name, index in self.indices.items()
        }
        return splits, contract

    def check_classes(self, root: str, folders: list[str]) -> None:
        class_names = self.fitted("target", lambda: classification_target(folders))["class_names"]
        if len(class_names) < 2:
            raise UserError(
                f"{root} holds one class folder ({class_names[0]}); a classifier needs two"
            )
        unknown = sorted(set(folders) - set(class_names))
        if unknown:
            raise UserError(
                f"{Path(root) / unknown[0]} is not a class of the model ({', '.join(class_names)})"
            )

    def fit_target(self, folders: list[str], names: pd.Series) -> dict:
        """Classes named after the folders, or (regression) the numbers the folders are named
        after, standardized with the training images' mean and std."""
        if self.hparams.task == "regression":
            train = names.iloc[self.indices["train"]]
            return regression_target(train, "value", self.hparams.units, None)
        return classification_target(folders)

    def check_files(self, files: list[Path], preprocessing: dict) -> list[np.ndarray | None]:
        """Decodes every file once, before training: a broken one stops the run here with one
        line (or is skipped), not later in a worker process. Returns each file's pixel moments
        for the normalization statistics; None for a skipped file."""

        def moments(path: Path):
            try:
                return pixel_moments(
                    image_values(open_image(path, preprocessing["channels"]), preprocessing)
                )
            except UserError as error:
                return error

        # Pillow decodes and resizes without holding the GIL: threads share the work.
        with ThreadPoolExecutor() as pool:
            results = list(pool.map(moments, files))
        errors = [result for result in results if isinstance(result, UserError)]
        if errors and not self.hparams.skip_unreadable:
            raise UserError(f"{errors[0]}, or set data.skip_unreadable=true")
        if errors:
            note(f"skipped {len(errors)} unreadable image files; the first: {errors[0]}")
        return [None if isinstance(result, UserError) else result for result in results]
