"""Images: files of any size and format, greyscale or colour, resized to a square and
normalized per channel with statistics of the training images. Pillow and numpy only."""

import os
import warnings
from functools import cache
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from ..console import TooLarge, UserError
from ..contract import Preprocessing as BasePreprocessing
from . import arrays, number, number_array

if TYPE_CHECKING:  # imported where an image is read: raw arrays need no Pillow
    from PIL import Image

# The image files that the images datamodule reads and predict accepts.
SUFFIXES = (".bmp", ".gif", ".jpeg", ".jpg", ".png", ".tif", ".tiff", ".webp")
# One filter everywhere: training, evaluation and prediction must resize alike, with the one the
# contract names. Pillow's bilinear filter (the default) widens with the scale factor, so
# downscaling averages instead of aliasing.
Resampling = Literal["nearest", "box", "bilinear", "hamming", "bicubic", "lanczos"]
ORIENTATION = 0x0112  # the EXIF tag
DTYPE = "float32"  # what the model takes
UPLOAD = "image/*"
# The media types of SUFFIXES, as the API's description lists them.
UPLOAD_TYPES = ["image/bmp", "image/gif", "image/jpeg", "image/png", "image/tiff", "image/webp"]
# What a request sends, for one-line refusals.
REQUEST = 'images: send {"inputs": [raw values]}, or an image file as the form field "file"'


class Preprocessing(BasePreprocessing):
    """Converted to `channels` (1: greyscale, 3: RGB), resized to image_size x image_size with
    Pillow's `resampling` filter, raw values scaled to `value_range` (files hold 0..255), then
    (x - mean) / std per channel. A pretrained backbone's image processor sets them all."""

    channels: int
    image_size: int
    value_range: list[float]
    mean: list[float]
    std: list[float]
    resampling: Resampling = "bilinear"


def input_shape(preprocessing: Preprocessing) -> list[int]:
    size = preprocessing.image_size
    return [preprocessing.channels, size, size]


# Fitting


def pixel_moments(raw: np.ndarray) -> np.ndarray:
    """Per channel: how many values, their sum and their sum of squares (float64), of one image
    (C, H, W) or a batch (N, C, H, W). The moments of several images add up."""
    values = np.moveaxis(raw, -3, 0).reshape(raw.shape[-3], -1).astype(np.float64)
    squares = np.einsum("ij,ij->i", values, values)
    return np.stack([np.full(len(values), values.shape[1]), values.sum(1), squares], 1)


def fit(moments: np.ndarray, channels: int, image_size: int, value_range) -> Preprocessing:
    """Per-channel mean and standard deviation from the training images' summed moments."""
    count, total, squares = moments.T
    mean = total / count
    std = np.sqrt(np.maximum(squares / count - mean**2, 0))
    std[std == 0] = 1  # a constant channel: nothing to scale
    return Preprocessing(
        channels=channels,
        image_size=image_size,
        value_range=list(value_range),
        mean=mean.tolist(),
        std=std.tolist(),
    )


# Encoding


@cache
def pillow():
    """Pillow's Image module, imported once an image is read (raw arrays need none). An image
    whose header claims more pixels than Pillow's limit is refused, in every thread, before
    anything is decoded: Pillow only warns up to twice the limit, then decodes it all."""
    from PIL import Image

    warnings.filterwarnings("error", category=Image.DecompressionBombWarning)
    return Image


def bombs() -> tuple[type[Exception], ...]:
    """What Pillow raises for an image over its limit."""
    return (pillow().DecompressionBombWarning, pillow().DecompressionBombError)


def open_image(source: str | Path | bytes, channels: int) -> "Image.Image":
    """An image file (or its bytes), decoded and converted to greyscale or RGB."""
    from PIL import ImageOps, UnidentifiedImageError

    pil = pillow()
    name = "the image" if isinstance(source, bytes) else str(source)
    try:
        with pil.open(BytesIO(source) if isinstance(source, bytes) else source) as file:
            # A photo as the camera was held. EXIF is parsed only where a file has it (TIFF
            # holds it among its own tags): parsing costs every file of a folder.
            image: Image.Image = file
            has_exif = "exif" in file.info or file.format == "TIFF"
            if has_exif and file.getexif().get(ORIENTATION, 1) != 1:
                image = ImageOps.exif_transpose(file)
            return eight_bits(image, name).convert("L" if channels == 1 else "RGB")
    except bombs():
        raise TooLarge(
            f"{name} claims more than {pil.MAX_IMAGE_PIXELS} pixels (a damaged file, or one "
            "made to exhaust memory); shrink or remove it"
        ) from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as error:
        reason = str(error).split("\n")[0] or type(error).__name__
        raise UserError(f"{name} is not a readable image ({reason}); fix or remove it") from None


def eight_bits(image: "Image.Image", name: str) -> "Image.Image":
    """16-bit and floating-point greyscale images scaled to 0..255: Pillow's convert() clips
    them instead, so that a 16-bit image would read as white and one of floats as black."""
    if image.mode not in ("I", "F") and not image.mode.startswith("I;16"):
        return image
    values = np.asarray(image, dtype=np.float64)
    if image.mode == "F":
        if values.size and not (values.min() >= 0 and values.max() <= 1):
            raise UserError(
                f"{name} holds floating-point values outside 0..1; save it with 8 or 16 bits "
                "per channel"
            )
        values = values * 255
    elif image.mode != "I" or values.max(initial=0) > 255:  # "I" holds 8-bit values too
        values = values / 257
    return pillow().fromarray(np.round(values).clip(0, 255).astype(np.uint8))


def image_values(
    image: "Image.Image", size: int, value_range, box=None, resampling: Resampling = "bilinear"
) -> np.ndarray:
    """Raw values (channels, size, size) as float32 in `value_range`: the image, or the part of
    it inside `box` (left, top, right, bottom), resized; files hold 0..255."""
    resized = image.resize((size, size), pillow().Resampling[resampling.upper()], box=box)
    pixels = np.asarray(resized).reshape(size, size, -1).transpose(2, 0, 1)
    low, high = value_range
    raw = np.ascontiguousarray(pixels, dtype=np.float32)
    raw *= np.float32((high - low) / 255)
    raw += np.float32(low)
    return raw


def normalize(raw: np.ndarray, preprocessing: Preprocessing) -> np.ndarray:
    """(x - mean) / std per channel, as float32, for one image (C, H, W) or a batch (N, C, H, W)
    of any real dtype."""
    mean, std = channel_statistics(tuple(preprocessing.mean), tuple(preprocessing.std))
    normalized = np.subtract(raw, mean, dtype=np.float32)  # cast on the way: no copy of its own
    normalized /= std
    return normalized


@cache
def channel_statistics(mean: tuple, std: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std as float32 arrays that broadcast over images, made once: made for each
    request, they cost a server a third of the request's conversion."""
    arrays = [np.asarray(values, dtype=np.float32).reshape(-1, 1, 1) for values in (mean, std)]
    for array in arrays:
        array.flags.writeable = False  # shared by every call
    return arrays[0], arrays[1]


def encode(source: str | Path | bytes, preprocessing: Preprocessing) -> np.ndarray:
    """An image file (or its bytes) as the model's input, exactly as evaluation prepares it."""
    p = preprocessing
    image = open_image(source, p.channels)
    return normalize(image_values(image, p.image_size, p.value_range, None, p.resampling), p)


# Prediction inputs


def image_files(folder: Path) -> list[Path]:
    """The image files below `folder`, in the order of their paths' parts; hidden files and
    folders and other files left out. os.scandir tells files from folders without a stat call
    per file, which a folder of 100,000 images would otherwise pay for on every run."""
    found: list[str] = []

    def scan(path: str) -> None:
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                if entry.is_dir():
                    if entry.is_symlink():  # followed, as folders of images linked in are
                        refuse_loop(entry.path, path)
                    scan(entry.path)
                elif entry.is_file() and os.path.splitext(entry.name)[1].lower() in SUFFIXES:
                    found.append(entry.path)

    scan(str(folder))
    return [Path(path) for path in sorted(found, key=lambda path: path.split(os.sep))]


def refuse_loop(link: str, folder: str) -> None:
    """A link to a folder that holds it would be read again and again: one line instead."""
    target, here = os.path.realpath(link), os.path.realpath(folder)
    if os.path.commonpath([target, here]) == target:
        raise UserError(f"{link} links to {target}, a folder that holds it: remove the link")


def from_arrays(array: np.ndarray, preprocessing: Preprocessing, source: str) -> np.ndarray:
    """Model inputs from raw values as the dataset stores them, of the model's shape (one sample,
    or no single channel axis, is fine)."""
    return prepare(shaped(array, preprocessing, source), preprocessing, source)


def shaped(array: np.ndarray, preprocessing: Preprocessing, source: str) -> np.ndarray:
    """Raw values of the model's shape, or one sample, or without a single channel axis, as a
    batch (N, C, H, W)."""
    if array.dtype.kind not in "fiu":
        raise UserError(f"{source} holds {array.dtype} values; expected raw values as numbers")
    shape = tuple(input_shape(preprocessing))
    one_channel = shape[0] == 1
    if array.shape[1:] == shape:
        batch = array
    elif array.shape == shape:
        batch = array[None]
    elif one_channel and array.shape[1:] == shape[1:]:
        batch = array[:, None]
    elif one_channel and array.shape == shape[1:]:
        batch = array[None, None]
    else:
        dims = ", ".join(map(str, shape))
        raise UserError(
            f"{source} has shape {array.shape}; expected (N, {dims}) or ({dims}): raw arrays "
            "are not resized, send image files for that"
        )
    if not len(batch):
        raise UserError(f"{source} holds no samples")
    return batch


def prepare(raw: np.ndarray, preprocessing: Preprocessing, source: str) -> np.ndarray:
    """Model inputs from a batch of raw values (N, C, H, W), refused if one lies outside
    value_range."""
    low, high = preprocessing.value_range
    if not (raw.min() >= low and raw.max() <= high):  # or NaN: the finite ones are looked at
        # Values beyond float32 become infinite, refused as such where inputs are checked.
        with np.errstate(over="ignore", invalid="ignore"):
            raw = raw.astype(np.float32)
        outside = raw[np.isfinite(raw) & ((raw < low) | (raw > high))]
        if len(outside):
            raise UserError(
                f"{source} holds values from {outside.min():g} to {outside.max():g}, outside "
                f"{low:g}..{high:g}: raw values as the training data stores them (value_range)"
            )
    return normalize(raw, preprocessing)


def from_files(files: list[Path] | list[bytes], preprocessing: Preprocessing) -> np.ndarray:
    # Each image goes into its place in the batch as it is read: one array for a whole folder,
    # not a list of them and then a copy.
    sample = np.dtype((DTYPE, tuple(input_shape(preprocessing))))
    images = (encode(file, preprocessing) for file in files)
    return np.fromiter(images, dtype=sample, count=len(files))


def read_inputs(path: Path, preprocessing: Preprocessing) -> tuple[np.ndarray, list[dict]]:
    """An image file, or the image files of a folder and its subfolders."""
    files = [path] if path.is_file() and path.suffix.lower() in SUFFIXES else []
    if path.is_dir():
        files = image_files(path)
        if not files:
            raise UserError(f"input={str(path)!r} holds no images ({', '.join(SUFFIXES)})")
    if not files:
        raise UserError(
            f"input={str(path)!r} is not an image, a folder of images ({', '.join(SUFFIXES)}) "
            "or a .npy array of raw images"
        )
    return from_files(files, preprocessing), [{"file": str(f), "index": None} for f in files]


def json_forms(preprocessing: Preprocessing) -> dict:
    """Raw values of the model's shape, one sample or several (and without the channel axis
    where there is one channel), as from_arrays takes them."""
    shape = tuple(input_shape(preprocessing))
    shapes = [(None, *shape), shape]
    if shape[0] == 1:
        shapes += [(None, *shape[1:]), shape[1:]]
    return {"inputs": arrays(*shapes, values=number(*preprocessing.value_range))}


def from_json(payload: dict, preprocessing: Preprocessing) -> np.ndarray:
    """The raw values of a request, as a batch that `prepare` makes model inputs of."""
    if "inputs" not in payload:
        raise UserError(f"this model takes {REQUEST}")
    return shaped(number_array(payload["inputs"], "inputs"), preprocessing, "inputs")


def from_upload(data: bytes, name: str, preprocessing: Preprocessing) -> np.ndarray:
    """An uploaded image; one that decodes to more pixels than Pillow's limit is refused before
    it is decoded."""
    try:
        return from_files([data], preprocessing)
    except TooLarge:
        raise TooLarge(f"{name} has over {pillow().MAX_IMAGE_PIXELS} pixels") from None
    except UserError:
        raise UserError(f"{name} is not an image that Pillow can read") from None


def form(preprocessing: Preprocessing) -> dict:
    size = preprocessing.image_size
    return {
        "type": "file",
        "accept": UPLOAD,
        "about": f"Input: an image of any size, resized to {size}x{size} as in training.",
        "hint": brightness_hint(preprocessing),
    }


def brightness_hint(preprocessing: Preprocessing) -> str | None:
    """What the training images looked like, from their mean brightness: mostly dark ones (such
    as light strokes on a dark background) or mostly light ones; None if neither."""
    low, high = preprocessing.value_range
    brightness = (float(np.mean(preprocessing.mean)) - low) / (high - low)
    if brightness < 1 / 3:
        return "The training images are mostly dark, e.g. light shapes on a dark background."
    if brightness > 2 / 3:
        return "The training images are mostly light, e.g. dark shapes on a light background."
    return None


def check(preprocessing: Preprocessing, shape: list, where: str) -> None:
    prepared = input_shape(preprocessing)
    if prepared != shape:
        raise UserError(f"{where} prepares images of shape {prepared}, the model takes {shape}")
    p = preprocessing
    if not len(p.mean) == len(p.std) == p.channels:
        raise UserError(f"{where} needs one mean and one std per channel ({p.channels})")
    if not all(np.isfinite(std) and std > 0 for std in p.std):
        raise UserError(f"{where} has normalization std {p.std}; it must be positive")


def files(preprocessing: Preprocessing) -> dict[str, str]:
    return {}
