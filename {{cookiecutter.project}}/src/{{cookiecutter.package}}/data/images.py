"""Image files, one subfolder per class: `python train.py data=images data.root=<folder>`."""

import math
import random
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from PIL import UnidentifiedImageError
from torch.utils.data import Dataset

from .. import targets
from ..console import UserError
from ..contract import Contract
from ..kinds.image import (
    SUFFIXES,
    Preprocessing,
    bombs,
    fit,
    image_files,
    image_values,
    normalize,
    open_image,
    pillow,
    pixel_moments,
)
from ..options import AUGMENT, ImageShape, validated
from ..targets import classification, regression
from .base import SPLITS, ContractDataModule, class_name, note
from .file_cache import FileCache

# data.image_size left null: the images' usual shorter side, up to this. Larger images cost
# more to decode and train on than small networks gain from them.
LARGEST_INFERRED_SIZE = 64
GREYSCALE_MODES = {"1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "I;16N", "F"}


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


class ImageFiles(Dataset):
    """Image files, each read when a batch needs it (in the DataLoader's worker processes),
    resized and normalized as `preprocessing` says; augmented when `augment` is given."""

    def __init__(self, files: list[Path], labels, preprocessing: Preprocessing, augment=None):
        self.files, self.labels = files, labels
        self.preprocessing, self.augment = preprocessing, augment or {}

    def __len__(self) -> int:
        return len(self.files)

    def unaugmented(self) -> "ImageFiles":
        return ImageFiles(self.files, self.labels, self.preprocessing)

    def __getitem__(self, index: int):
        p = self.preprocessing
        image = open_image(self.files[index], p.channels)
        box = None
        if self.augment.get("crop_scale"):
            box = random_box(*image.size, self.augment["crop_scale"], self.augment["crop_ratio"])
        raw = image_values(image, p.image_size, p.value_range, box, p.resampling)
        if self.augment.get("flip") and random.random() < 0.5:
            raw = raw[..., ::-1]
        return torch.from_numpy(normalize(raw, p)), self.labels[index]


def class_folders(folder: Path) -> dict[str, list[Path]]:
    """Each class subfolder's image files, by class name."""
    classes = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise UserError(
            f"{folder} holds no class subfolders; put each class's images in a subfolder named "
            "after the class"
        )
    files = {class_name(path): image_files(path) for path in classes}
    for name, found in files.items():
        if not found:
            raise UserError(
                f"{folder / name} holds no images ({', '.join(SUFFIXES)}); add some or "
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
    train/, val/ and test/ folders of class subfolders), resized to `image_size`; `channels` and
    `image_size` left null are read off the images."""

    kind = "image"
    adopts_preprocessing = True

    def __init__(
        self,
        root: str | None = None,
        channels: int | None = None,
        image_size: int | None = None,
        augment: dict | None = None,
        skip_unreadable: bool = False,
        cache_dir: str | None = None,
        task: str = "classification",
        units: str | None = None,
        **common,
    ):
        # A mistake in these would show only in a worker, mid-epoch.
        validated(ImageShape, {"channels": channels, "image_size": image_size}, prefix="data.")
        if augment is not None:
            validated(AUGMENT, augment, prefix="data.augment.")
        super().__init__(channels=channels, image_size=image_size, **common)

    def read(self) -> dict:
        """Every readable image, with its folder's name, and each one's pixel moments, which
        `fit` sums over the training images."""
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
        channels, size = self.image_shape([file for _, file, _ in samples])
        moments = self.check_files([file for _, file, _ in samples], channels, size)
        samples = [sample for sample, m in zip(samples, moments, strict=True) if m is not None]
        if "all" in groups:
            self.split(len(samples))
        else:
            names = np.array([group for group, _, _ in samples])
            self.indices = {name: np.flatnonzero(names == name) for name in SPLITS}
        return {
            "files": [file for _, file, _ in samples],
            "names": pd.Series([name for _, _, name in samples]),
            "folders": folders,
            "moments": [m for m in moments if m is not None],
            "shape": (channels, size),
        }

    def image_shape(self, files: list[Path]) -> tuple[int, int]:
        """The channels and size images are read with: a trained model's; else data.channels and
        data.image_size, each read off the images' headers where null (greyscale if every image
        is; the median shorter side, at most LARGEST_INFERRED_SIZE) and stated."""
        if self.trained:
            return self.trained.input.shape[0], self.trained.input.shape[-1]
        if self.given:  # a pretrained backbone's
            return self.given["channels"], self.given["image_size"]
        channels, size = self.hparams.channels, self.hparams.image_size
        if channels is None or size is None:
            cache = FileCache(self.hparams.cache_dir, "headers", root=self.hparams.root)
            headers = [h for h in cache.results(files, header) if h is not None]
            if channels is None:
                channels = 1 if all(mode in GREYSCALE_MODES for mode, _ in headers) else 3
                note(f"data.channels={channels}: {'every' if channels == 1 else 'not every'} "
                     "image is greyscale; set data.channels to choose")  # fmt: skip
            if size is None:
                shorter = int(np.median([min(dims) for _, dims in headers])) if headers else 1
                size = max(1, min(shorter, LARGEST_INFERRED_SIZE))
                note(f"data.image_size={size}: the images' median shorter side is {shorter} "
                     f"pixels (at most {LARGEST_INFERRED_SIZE} is taken); set data.image_size "
                     "to choose")  # fmt: skip
        return channels, size

    def fit(self, samples: dict) -> Contract:
        """Normalization from the training images; classes named after the folders, or
        (regression) the numbers the folders are named after, standardized with the training
        images' mean and std."""
        channels, size = samples["shape"]
        moments = sum(samples["moments"][index] for index in self.indices["train"])
        # Files hold 0..255; the model sees them as 0..1 before normalization.
        preprocessing = fit(moments, channels, size, [0, 1])
        if self.hparams.task == "regression":
            train = samples["names"].iloc[self.indices["train"]]
            target = regression.fit(train, "value", self.hparams.units)
        else:
            target = classification.fit(samples["folders"])
        return self.declare(preprocessing, target)

    def apply(self, samples: dict, contract: Contract) -> dict:
        task = targets.get(contract.target.task)
        labels = task.encode(samples["names"], contract.target)
        return {
            name: ImageFiles(
                [samples["files"][i] for i in index],
                labels[index],
                contract.preprocessing,
                self.hparams.augment if name == "train" else None,
            )
            for name, index in self.indices.items()
        }

    def check_classes(self, root: str, folders: list[str]) -> None:
        """Two classes at least; evaluating a trained model, only classes it knows."""
        if not self.trained:
            if len(folders) < 2:
                raise UserError(
                    f"{root} holds one class folder ({folders[0]}); a classifier needs two"
                )
            return
        class_names = self.trained.target.class_names
        unknown = sorted(set(folders) - set(class_names))
        if unknown:
            raise UserError(
                f"{Path(root) / unknown[0]} is not a class of the model ({', '.join(class_names)})"
            )

    def check_files(self, files: list[Path], channels: int, size: int) -> list:
        """Decodes every file once, before training: a broken one stops the run here with one
        line (or is skipped), not later in a worker process. Returns each file's pixel moments
        for the normalization statistics; None for a skipped file."""

        def moments(path: Path):
            try:
                values = image_values(open_image(path, channels), size, [0, 1])
                return pixel_moments(values).tolist()
            except UserError as error:
                return {"error": str(error)}

        cache = FileCache(
            self.hparams.cache_dir, "moments", root=self.hparams.root, channels=channels, size=size
        )
        results = cache.results(files, moments)
        errors = [result["error"] for result in results if isinstance(result, dict)]
        if errors and not self.hparams.skip_unreadable:
            raise UserError(f"{errors[0]}, or set data.skip_unreadable=true")
        if errors:
            note(f"skipped {len(errors)} unreadable image files; the first: {errors[0]}")
        return [None if isinstance(result, dict) else np.array(result) for result in results]


def header(path: Path) -> tuple[str, tuple[int, int]] | None:
    """An image's mode and size, read from its header alone; None for a file Pillow cannot
    open (check_files reports it)."""
    try:
        with pillow().open(path) as image:
            return image.mode, image.size
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, *bombs()):
        return None
