"""Writes the scikit-learn digits as a folder of image files, the layout `data=images` reads:

    python scripts/example_images.py <folder>
    python train.py data=images data.root=<folder>

One subfolder per digit, 32x32 RGB PNG files: each digit in a colour of its own on a dark
background of another, so that the three channels differ. Offline and deterministic.
"""

import colorsys
from pathlib import Path

import numpy as np
from example_folder import folder_argument  # beside this script
from PIL import Image
from sklearn.datasets import load_digits

SIZE = 32


def write(folder: Path, seed: int = 0) -> Path:
    digits = load_digits()
    random = np.random.default_rng(seed)
    for index, (pixels, label) in enumerate(zip(digits.images, digits.target, strict=True)):
        ink = np.array(colorsys.hsv_to_rgb(random.random(), 0.8, 1.0))
        paper = np.array(colorsys.hsv_to_rgb(random.random(), 0.6, 0.25))
        share = (pixels / 16)[..., None]  # 0..16 in the dataset: how much ink
        rgb = np.round(255 * (share * ink + (1 - share) * paper)).astype(np.uint8)
        image = Image.fromarray(rgb).resize((SIZE, SIZE), Image.Resampling.BICUBIC)
        path = folder / str(label) / f"{index:04}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        image.save(path)
    return folder


if __name__ == "__main__":
    folder = write(folder_argument(__doc__))
    print(f"wrote {len(list(folder.rglob('*.png')))} images to {folder}")
