"""Framework tests of what users feed `data=images` and `data=table`: the files and layouts they
accept, and one clear line for each mistake."""

import json
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import (
    FAST_LATENCY,
    TINY,
    compose_config,
    contract_of,
    error_lines,
    png_claiming,
    run_cli,
    run_predict,
)
from PIL import Image

from {{ cookiecutter.package }}.builders import build_datamodule, build_model
from {{ cookiecutter.package }}.console import UserError
from {{ cookiecutter.package }}.kinds.image import encode as decode_image
from {{ cookiecutter.package }}.kinds.image import open_image
from {{ cookiecutter.package }}.kinds.image import read_inputs as read_images
from {{ cookiecutter.package }}.kinds.table import encode as encode_table
from {{ cookiecutter.package }}.kinds.table import features_setting
from {{ cookiecutter.package }}.kinds.table import form as table_form
from {{ cookiecutter.package }}.targets.classification import Target as Classes
from {{ cookiecutter.package }}.targets.classification import encode as encode_classes
from {{ cookiecutter.package }}.targets.regression import Target
from {{ cookiecutter.package }}.targets.regression import encode as encode_target

COLOURS = {"cat": (200, 40, 90), "dog": (40, 180, 200)}


def image(path, size=(12, 10), colour=(90, 160, 30), mode="RGB", **save):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, colour).convert(mode).save(path, **save)
    return path


def image_folder(root, per_class=8):
    for name, colour in COLOURS.items():
        for index in range(per_class):
            image(root / name / f"{index}.png", colour=colour)
    return root


def build(tmp_path, *overrides):
    cfg = compose_config("train", tmp_path / "run", list(overrides))
    return build_datamodule(cfg), cfg


def build_images(tmp_path, root, *overrides):
    return build(tmp_path, "data=images", f"data.root={root}", "data.image_size=8", *overrides)


def fails_with(message, builder, *args, **kwargs):
    with pytest.raises(UserError) as error:
        builder(*args, **kwargs)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


# Images


def test_every_common_format_and_mode_is_read_and_other_files_are_ignored(tmp_path):
    root = tmp_path / "images"
    formats = {"png": {}, "jpg": {}, "jpeg": {}, "bmp": {}, "webp": {}, "tif": {}, "gif": {}}
    for name, colour in COLOURS.items():
        for suffix, mode in zip(formats, ["RGB", "L", "RGB", "P", "RGBA", "L", "P"], strict=True):
            image(root / name / "deeper" / f"x.{suffix.upper()}", (30, 17), colour, mode)
        (root / name / ".DS_Store").write_bytes(b"\0\1")
        (root / name / "Thumbs.db").write_bytes(b"\0\1")
        (root / name / "notes.txt").write_text("not an image")
        image(root / name / ".hidden.png", colour=colour)
        image(root / name / ".thumbnails" / "x.png", colour=colour)
    (root / ".git").mkdir()
    for channels in (1, 3):
        datamodule, cfg = build_images(
            tmp_path, root, f"data.channels={channels}", "data.val_fraction=0.3"
        )
        files = [f for split in datamodule.splits.values() for f in split.files]
        assert sorted(f.suffix.lower()[1:] for f in files) == sorted(2 * list(formats))
        assert datamodule.contract.input.shape == [channels, 8, 8]
        assert (cfg.data.num_classes, cfg.data.num_features) == (2, channels * 64)
        assert datamodule.splits["train"][0][0].shape == (channels, 8, 8)


def test_channels_and_size_left_unset_are_read_off_the_images(tmp_path, capsys):
    grey, colour, large = tmp_path / "grey", tmp_path / "colour", tmp_path / "large"
    for index, name in enumerate(["cat", "dog"] * 4):
        image(grey / name / f"{index}.png", (25, 25), COLOURS[name], mode="L")
        image(grey / name / f"{index}.tif", (27, 25), COLOURS[name], mode="I;16")
        image(colour / name / f"{index}.png", (30, 20), COLOURS[name])
        image(colour / name / f"{index}.jpg", (30, 22), COLOURS[name], mode="L")
        image(large / name / f"{index}.jpg", (500, 375), COLOURS[name])
    for root, shape in ((grey, [1, 25, 25]), (colour, [3, 21, 21]), (large, [3, 64, 64])):
        cfg = compose_config("train", tmp_path / "run", ["data=images", f"data.root={root}"])
        assert build_datamodule(cfg).contract.input.shape == shape
        assert (cfg.data.channels, cfg.data.image_size) == (shape[0], shape[-1])
    said = capsys.readouterr().out
    assert "note: data.channels=1: every image is greyscale" in said
    assert "note: data.image_size=25: the images' median shorter side is 25 pixels" in said
    assert "note: data.image_size=64: the images' median shorter side is 375 pixels" in said
    # Set, they are kept as they are, and nothing is said.
    datamodule, _ = build(tmp_path, "data=images", f"data.root={grey}", "data.channels=3",
                          "data.image_size=12")  # fmt: skip
    assert datamodule.contract.input.shape == [3, 12, 12]
    assert "note:" not in capsys.readouterr().out


def test_train_val_test_folders_are_used_as_given(tmp_path):
    root = tmp_path / "images"
    for split, count in (("train", 6), ("val", 3), ("test", 2)):
        image_folder(root / split, count)
    datamodule, _ = build_images(tmp_path, root)
    for split, count in (("train", 6), ("val", 3), ("test", 2)):
        files = datamodule.splits[split].files
        assert len(files) == 2 * count and {f.parents[1].name for f in files} == {split}
    assert datamodule.contract.target.class_names == ["cat", "dog"]


def test_an_image_from_bytes_is_the_image_from_its_file(tmp_path):
    root = image_folder(tmp_path / "images")
    datamodule, _ = build_images(tmp_path, root)
    preprocessing = datamodule.contract.preprocessing
    path = image(tmp_path / "photo.jpg", (40, 25), (10, 200, 120))
    from_bytes = decode_image(path.read_bytes(), preprocessing)
    np.testing.assert_array_equal(from_bytes, decode_image(path, preprocessing))


def test_16_bit_float_and_rotated_images_read_as_their_8_bit_upright_originals(tmp_path):
    pixels = np.random.default_rng(0).integers(0, 256, (6, 9), dtype=np.uint8)
    Image.fromarray(pixels).save(eight := tmp_path / "eight.png")
    Image.fromarray(pixels.astype(np.uint16) * 257).save(sixteen := tmp_path / "sixteen.png")
    Image.fromarray(pixels.astype(np.float32) / 255).save(floats := tmp_path / "floats.tiff")
    exif = Image.Exif()
    exif[0x0112] = 6  # stored sideways: shown turned by 90 degrees clockwise
    Image.fromarray(pixels).rotate(90, expand=True).save(
        turned := tmp_path / "turned.png", exif=exif
    )
    assert [Image.open(path).mode for path in (sixteen, floats)] == ["I;16", "F"]
    for path in (eight, sixteen, floats, turned):
        np.testing.assert_array_equal(np.asarray(open_image(path, 1)), pixels, err_msg=path.name)
    Image.fromarray(pixels.astype(np.float32)).save(unscaled := tmp_path / "unscaled.tiff")
    fails_with("holds floating-point values outside 0..1", open_image, unscaled, 1)


# Pillow warns from its limit of pixels on, and refuses from twice the limit on.
CLAIMS = {"over-the-limit": (10_000, 10_000), "over-twice-the-limit": (20_000, 20_000)}


@pytest.mark.slow  # a train.py process per case
@pytest.mark.parametrize("size", CLAIMS.values(), ids=CLAIMS)
def test_an_image_that_claims_a_huge_size_stops_training_in_one_line(tmp_path, size):
    root = image_folder(tmp_path / "images")
    bomb = root / "cat" / "bomb.png"
    bomb.write_bytes(png_claiming(*size))
    run = tmp_path / "run"
    result = run_cli("train.py", "data=images", f"data.root={root}", f"hydra.run.dir={run}")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "Warning" not in result.stderr
    assert error_lines(result) == [
        f"error: {bomb} claims more than {Image.MAX_IMAGE_PIXELS} pixels (a damaged file, or one "
        "made to exhaust memory); shrink or remove it, or set data.skip_unreadable=true"
    ]
    assert not (run / "checkpoints").exists()


def test_normalization_comes_from_the_training_images(tmp_path):
    root = image_folder(tmp_path / "images")
    datamodule, _ = build_images(tmp_path, root, "data.augment=null")
    inputs = np.stack([x.numpy() for x, _ in datamodule.splits["train"]])
    np.testing.assert_allclose(inputs.mean(axis=(0, 2, 3)), 0, atol=1e-5)
    np.testing.assert_allclose(inputs.std(axis=(0, 2, 3)), 1, atol=1e-4)


def test_unreadable_images_stop_the_run_or_are_skipped_and_counted(tmp_path, capsys):
    root = image_folder(tmp_path / "images")
    broken = root / "cat" / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    noise = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    Image.fromarray(noise).save(half := root / "dog" / "half.jpg")
    half.write_bytes(half.read_bytes()[:2000])  # cut off in the middle of its pixels
    fails_with(f"{broken} is not a readable image", build_images, tmp_path, root)
    fails_with("or set data.skip_unreadable=true", build_images, tmp_path, root)
    datamodule, _ = build_images(tmp_path, root, "data.skip_unreadable=true")
    assert (
        f"note: skipped 2 unreadable image files; the first: {broken}" in capsys.readouterr().out
    )
    files = {f for split in datamodule.splits.values() for f in split.files}
    assert len(files) == 16 and broken not in files and half not in files


def test_a_later_run_decodes_only_the_files_added_or_changed_since(tmp_path):
    root = image_folder(tmp_path / "images")
    cache = f"data.cache_dir={tmp_path / 'cache'}"
    first, _ = build_images(tmp_path, root, cache, "data.augment=null")
    # Same size and modification time, but no longer an image: a run that decoded it would stop.
    changed = root / "cat" / "0.png"
    stat = changed.stat()
    changed.write_bytes(b"\0" * stat.st_size)
    os.utime(changed, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    later, _ = build_images(tmp_path, root, cache, "data.augment=null")
    assert later.contract == first.contract
    assert later.splits["train"].files == first.splits["train"].files
    # A new modification time is a changed file, decoded again; so is every file without a cache.
    os.utime(changed, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    fails_with(f"{changed} is not a readable image", build_images, tmp_path, root, cache)
    os.utime(changed, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    fails_with(
        f"{changed} is not a readable image", build_images, tmp_path, root, "data.cache_dir=null"
    )


def test_a_cache_folder_that_cannot_be_written_costs_only_the_reuse(tmp_path, capsys):
    root = image_folder(tmp_path / "images")
    (blocked := tmp_path / "a file").write_text("")
    first, _ = build_images(tmp_path, root, f"data.cache_dir={blocked}")
    assert f"note: cannot keep what setup learned of the files in {blocked}" in (
        capsys.readouterr().out
    )
    assert first.contract == build_images(tmp_path, root, "data.cache_dir=null")[0].contract


def test_a_linked_folder_of_images_is_read_and_a_link_to_a_folder_above_it_refused(tmp_path):
    root = image_folder(tmp_path / "images")
    image_folder(tmp_path / "more")
    (root / "cat" / "more").symlink_to(tmp_path / "more" / "cat")
    datamodule, _ = build_images(tmp_path, root)
    files = [file for split in datamodule.splits.values() for file in split.files]
    assert len(files) == 3 * 8 and root / "cat" / "more" / "0.png" in files
    (root / "dog" / "up").symlink_to(root)  # read forever: images/dog/up/dog/up/...
    line = f"{root}/dog/up links to {root.resolve()}, a folder that holds it: remove the link"
    fails_with(line, build_images, tmp_path, root)


# An archive made on another system keeps its names' bytes on Linux (café in Latin-1), which
# Python reads with escapes that UTF-8 cannot write: into setup's cache, a table, a manifest.
@pytest.mark.skipif(sys.platform == "darwin", reason="macOS file systems take UTF-8 names only")
def test_an_image_named_in_another_encoding_is_read_and_a_class_folder_so_named_refused(tmp_path):
    root = image_folder(tmp_path / "images")
    latin = Path(os.fsdecode(bytes(root / "cat") + b"/caf\xe9.png"))
    image(latin, colour=COLOURS["cat"])
    cache = tmp_path / "cache"
    written = {}
    for _ in range(2):  # the second run finds every file in the cache, and writes none
        datamodule, _ = build_images(tmp_path, root, f"data.cache_dir={cache}")
        assert latin in [file for split in datamodule.splits.values() for file in split.files]
        assert written in ({}, {path: path.stat().st_mtime_ns for path in cache.iterdir()})
        written = {path: path.stat().st_mtime_ns for path in cache.iterdir()}
    assert all(r"caf\\xe9.png" in path.read_text() for path in written)  # its bytes spelled out
    os.rename(root / "dog", os.fsdecode(bytes(root) + b"/chien\xe9"))
    line = f"class folder {root}/chien\\xe9 is named in another encoding than UTF-8; rename it"
    fails_with(line, build_images, tmp_path, root)


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ({}, "holds no class subfolders; put each class's images in a subfolder"),
        ({"loose.png": "image"}, "holds no class subfolders"),
        ({"cat/0.png": "image"}, "holds one class folder (cat); a classifier needs two"),
        ({"cat/0.png": "image", "dog/a.txt": "text"}, "dog holds no images (.bmp, .gif"),
        ({"train/cat/0.png": "image", "val/cat/0.png": "image"}, "has train/, val/ but no test/"),
        (
            {f"{s}/{c}/0.png": "image" for s in ("train", "val", "test") for c in ("cat", "dog")}
            | {"test/owl/0.png": "image"},
            "test/owl is a class that",
        ),
    ],
    ids=["empty", "no-folders", "one-class", "empty-class", "partial-split", "unknown-class"],
)
def test_bad_image_folders_give_one_line(tmp_path, layout, message):
    root = tmp_path / "images"
    root.mkdir()
    for name, kind in layout.items():
        if kind == "image":
            image(root / name)
        else:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text("text")
    fails_with(message, build_images, tmp_path, root)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("data.augment.flip=no", "data.augment.flip=no must be true or false"),
        ("data.augment.crop_scale=[0.9,0.5]", "data.augment.crop_scale=[0.9, 0.5] must be two "),
        ("data.augment.crop_scale=[0.5,1.5]", "fractions of the image's area, low to high, above"),
        ("data.augment.crop_ratio=0.75", "data.augment.crop_ratio=0.75 must be two aspect ratios"),
        ("data.augment.crop_ratio=null", "crop_scale and data.augment.crop_ratio go together"),
        ("+data.augment.rotate=15", "data.augment.rotate is not a setting; choose from crop_"),
        ("data.skip_unreadable=off", "data.skip_unreadable=off must be true or false"),
        ("data.channels=2", "data.channels=2 must be 1 (greyscale) or 3 (colour), or null"),
        ("data.image_size=0", "data.image_size=0 must be the side images are resized to"),
        ("data.root=[a,b]", "data.root=['a', 'b'] must be one value, not a list"),
    ],
)
def test_image_settings_mistakes_give_one_line_before_a_worker_meets_them(
    tmp_path, override, message
):
    root = image_folder(tmp_path / "images")
    fails_with(message, build_images, tmp_path, root, override)


def test_folders_named_by_numbers_are_a_regression_target(tmp_path):
    root = tmp_path / "images"
    for value in ("1", "2.5", "10"):
        for index in range(8):
            image(root / value / f"{index}.png", colour=(20 * index, 90, 30))
    regression = ["data.task=regression", "data.units=years", "model=regressor"]
    datamodule, cfg = build_images(tmp_path, root, *regression)
    target = datamodule.contract.target.to_dict()
    train = datamodule.indices["train"]
    values = np.repeat([1.0, 10.0, 2.5], 8)  # folders in sorted order: 1, 10, 2.5
    assert target["task"] == "regression" and target["units"] == "years"
    assert target["mean"] == pytest.approx(values[train].mean())
    labels = np.array(datamodule.splits["train"].labels)
    assert labels.dtype == np.float32
    np.testing.assert_allclose(labels * target["std"] + target["mean"], values[train], rtol=1e-6)
    assert build_model(cfg, datamodule).hparams.net["num_classes"] == 1  # one output: the value
    (root / "cat").mkdir()
    image(root / "cat" / "0.png")
    fails_with(
        "cat is not named by a number: with data.task=regression",
        build_images,
        tmp_path,
        root,
        "data.task=regression",
    )
    fails_with("data.task=ranking is unknown", build_images, tmp_path, root, "data.task=ranking")


def test_predict_on_a_folder_without_images_gives_one_line(tmp_path):
    (tmp_path / "notes.txt").write_text("no image here")
    fails_with(f"input={str(tmp_path)!r} holds no images (", read_images, tmp_path, None)


def test_a_missing_root_gives_one_line(tmp_path):
    fails_with("data=images needs data.root", build, tmp_path, "data=images")
    fails_with("is not a folder; pass data.root=", build_images, tmp_path, tmp_path / "nowhere")


@pytest.mark.slow  # a train.py process
def test_the_command_line_shows_one_line_and_no_traceback(tmp_path):
    (tmp_path / "empty").mkdir()
    result = run_cli(
        "train.py",
        "data=images",
        f"data.root={tmp_path / 'empty'}",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'empty'} holds no class subfolders; put each class's images in a "
        "subfolder named after the class"
    ]


# Tables


def table(tmp_path, name="data.csv", rows=40, **columns) -> str:
    """A table with a numeric and a text feature and a text target, plus `columns`."""
    random = np.random.default_rng(0)
    frame = pd.DataFrame(
        {
            "size": random.normal(10, 2, rows),
            "colour": random.choice(["red", "green", "blue"], rows),
            "kind": random.choice(["a", "b"], rows),
        }
        | columns
    )
    path = tmp_path / name
    if path.suffix == ".parquet":
        frame.to_parquet(path)
    elif path.suffix == ".jsonl":  # Python's json: pandas' writes 10 significant digits
        path.write_text("".join(f"{json.dumps(row)}\n" for row in frame.to_dict("records")))
    else:
        frame.to_csv(path, index=False)
    return str(path)


def build_table(tmp_path, path, *overrides, target="kind"):
    return build(tmp_path, "data=table", f"data.path={path}", f"data.target={target}", *overrides)


def test_csv_parquet_and_json_lines_give_the_same_contract_and_rows(tmp_path):
    csv, _ = build_table(tmp_path, table(tmp_path))
    parquet, cfg = build_table(tmp_path, table(tmp_path, "data.parquet"))
    json_lines, _ = build_table(tmp_path, table(tmp_path, "data.jsonl"))
    for other in (parquet, json_lines):
        assert contract_of(csv) == contract_of(other)
        assert csv.splits["train"].inputs.equal(other.splits["train"].inputs)
    preprocessing = csv.contract.preprocessing.to_dict()
    assert preprocessing["features"] == [
        "size",
        "colour=blue",
        "colour=green",
        "colour=red",
        "colour=<unknown>",
    ]
    assert csv.contract.target.to_dict() == {
        "task": "classification",
        "name": "kind",
        "class_names": ["a", "b"],
    }
    assert (cfg.data.num_features, cfg.data.num_classes) == (5, 2)
    assert type(build_model(cfg).net).__name__ == "MLP"  # data=table's default network


def test_rows_are_encoded_by_column_name_with_training_statistics(tmp_path):
    datamodule, _ = build_table(
        tmp_path, table(tmp_path, code=[1, 2, 3, 4] * 10), "data.categorical=[code]"
    )
    preprocessing = datamodule.contract.preprocessing
    size, colour, code = preprocessing.columns
    assert code.vocabulary == ["1", "2", "3", "4"]
    rows = pd.DataFrame(
        {
            "code": [2.0, None, 9],  # 2.0 is category "2"; 9 was never seen
            "colour": ["red", "purple", None],
            "extra": [1, 2, 3],  # not a feature: ignored
            "size": [size.mean, None, size.mean + size.std],
        }
    )
    encoded = encode_table(rows, preprocessing)
    most_frequent = colour.vocabulary.index(colour.fill)
    expected = np.zeros((3, 10), np.float32)
    expected[:, 0] = [0, 0, 1]  # standardized; missing: the training mean
    red = colour.vocabulary.index("red")
    expected[[0, 1, 2], [1 + red, 1 + 3, 1 + most_frequent]] = 1  # red, unknown, most frequent
    expected[[0, 1, 2], [5 + 1, 5 + code.vocabulary.index(code.fill), 9]] = 1
    np.testing.assert_allclose(encoded, expected, atol=1e-6)
    without = rows.drop(columns="colour")
    fails_with("rows.csv has no column 'colour'", encode_table, without, preprocessing, "rows.csv")
    words = rows.assign(size="large")
    fails_with("'size' holds text; the model was trained", encode_table, words, preprocessing)


def test_an_integer_target_with_few_values_is_classification(tmp_path):
    path = table(tmp_path, label=[3, 1, 2, 1] * 10)
    datamodule, _ = build_table(tmp_path, path, "data.features=[size,colour]", target="label")
    assert datamodule.contract.target.class_names == ["1", "2", "3"]
    labels = pd.read_csv(path)["label"].to_numpy()
    assert (
        datamodule.splits["val"].targets.numpy() == labels[datamodule.indices["val"]] - 1
    ).all()


@pytest.mark.parametrize(
    ("columns", "overrides", "target", "message"),
    [
        ({}, ["data.target=null"], "kind", "needs data.path=<.csv, .parquet or .jsonl file>"),
        ({}, [], "species", "has no column 'species'; its columns: size, colour, kind"),
        ({}, ["data.features=[size,weight]"], "kind", "has no column 'weight'"),
        ({}, ["data.features=[size,kind]"], "kind", "data.features holds the target column"),
        ({}, ["data.categorical=[height]"], "kind", "has no column 'height'"),
        ({}, ["data.features=[size,colour,size]"], "kind", "data.features names 'size' twice"),
        ({}, ["data.categorical=[kind]"], "kind", "data.categorical names the target column"),
        ({}, ["data.features=size"], "kind", "data.features=size must be a list of column names"),
        ({}, ["data.features=[]"], "kind", "data.features=[] must be a list of column names"),
        ({}, ["data.categorical=colour"], "kind", "data.categorical=colour must be a list of"),
        ({"one": ["x"] * 40}, [], "one", "target column 'one' holds one class (x)"),
        ({}, ["data.task=regression"], "kind", "holds text: a regression target must be numbers"),
        ({"flat": [3.0] * 40}, ["data.task=regression"], "flat", "is 3.0 in every training row"),
        ({}, ["data.task=ranking"], "kind", "data.task=ranking is unknown"),
        (
            {"gap": [None, "a"] * 20},
            [],
            "gap",
            "target column 'gap' is empty in 20 rows (the first: row 0); fill them, or drop "
            "them with data.drop_missing_target=true",
        ),
        ({"gap": ["b", "a"] * 19 + ["a", None]}, [], "gap", "empty in 1 row (the first: row 39)"),
        (
            {"weight": [1.0] * 7 + [np.inf] + [2.0, -np.inf] * 16},
            [],
            "kind",
            "(data.features): column 'weight' holds inf in row 7 (infinite in 17 of 40 rows), "
            "which would make the loss NaN",
        ),
        (
            {"price": [*np.linspace(1, 9, 39), -np.inf]},
            ["model=regressor"],
            "price",
            "(data.target): column 'price' holds -inf in row 39 (infinite in 1 of 40 rows)",
        ),
        (
            {"customer": [f"C-{index:05}" for index in range(40)]},
            [],
            "kind",
            "column 'customer' holds 28 distinct values in 28 training rows: an identifier, not "
            "categories, which one-hot encoding would make a feature per row; leave it out with "
            "data.features=[size,colour]",
        ),
        (
            {"code": [f"{index % 30}" for index in range(40)]},
            ["data.features=[size,code]", "data.categorical=[code]"],
            "kind",
            "training rows: an identifier, not categories",
        ),
        (
            {"tags": [[1, 2], [3]] * 20},
            [],
            "kind",
            "column 'tags' holds ndarray values such as array([1, 2]), not numbers, text or "
            "dates: flatten it into columns of their own, or leave it out of data.features",
        ),
        ({"place": [{"x": 1.0, "y": 2.0}] * 40}, [], "kind", "column 'place' holds dict values"),
        (
            {"seen": ["2024-03-01", "2024-03-02", "soon"] + ["2024-04-01"] * 37},
            [],
            "kind",
            "column 'seen' holds 'soon' in row 2, which is no date as its others are (%Y-%m-%d)",
        ),
        ({}, ["data.drop_missing_target=yes"], "kind", "drop_missing_target=yes must be true or"),
        (
            {"age": ["12", "about 12"] * 20},
            [],
            "kind",
            "'age' holds numbers and text such as 'about 12'",
        ),
        (
            {"price": ["1.5", "cheap"] * 20},
            ["data.task=regression"],
            "price",
            "target column 'price' holds numbers and text such as 'cheap'; fix them: a "
            "regression target must be numbers (data.task=classification reads it as class",
        ),
        (
            {"span": pd.timedelta_range("1h", periods=40)},
            [],
            "kind",
            "column 'span' holds timedelta64",
        ),
        (
            {"order": [f"O-{index:03}" for index in range(40)]},
            [],
            "order",
            "target column 'order' holds 40 classes in 40 rows: an identifier, not classes to "
            "learn; pass data.target=<the column to predict>, or data.task=classification if",
        ),
        ({}, ["data.num_classes=5"], "kind", "data.num_classes=5, but the data has 2: set"),
        ({}, ["data.val_fraction=0.01"], "kind", "40 samples leave a split empty"),
    ],
    ids=[
        "no-target",
        "missing-target",
        "missing-feature",
        "target-as-feature",
        "missing-categorical",
        "repeated-feature",
        "categorical-target",
        "one-feature-name",
        "no-features",
        "one-categorical-name",
        "one-class",
        "text-regression",
        "constant-regression",
        "unknown-task",
        "empty-target",
        "one-empty-target",
        "inf-feature",
        "inf-target",
        "identifier",
        "identifier-codes",
        "list",
        "struct",
        "not-a-date",
        "drop-not-bool",
        "unparsable",
        "unparsable-target",
        "durations",
        "identifier-target",
        "wrong-num-classes",
        "empty-split",
    ],
)
def test_bad_tables_give_one_line(tmp_path, columns, overrides, target, message):
    path = table(tmp_path, "data.parquet", **columns)  # Parquet keeps each column's type
    fails_with(message, build_table, tmp_path, path, *overrides, target=target)


def test_the_features_setting_a_line_suggests_reads_back_as_the_names(tmp_path):
    names = ["size", "Größe", "2020", "it's", "first name"]
    setting = features_setting(names)
    assert setting.startswith('"') and setting.endswith('"')  # for the shell
    cfg = compose_config("train", tmp_path, ["data=table", setting[1:-1]])
    assert list(cfg.data.features) == names
    assert features_setting(["size", "colour"]) == "data.features=[size,colour]"


def test_a_table_of_the_target_alone_is_one_line(tmp_path):
    path = tmp_path / "labels.csv"
    pd.DataFrame({"kind": ["a", "b"] * 20}).to_csv(path, index=False)
    fails_with("labels.csv has no column but the target 'kind'", build_table, tmp_path, path)


def test_a_numeric_target_is_a_regression_standardized_on_the_training_rows(tmp_path):
    prices = np.linspace(1, 9, 40)
    path = table(tmp_path, "data.parquet", price=prices, n=list(range(40)))
    datamodule, _ = build_table(tmp_path, path, "data.units=EUR", target="price")
    target = datamodule.contract.target.to_dict()
    train = prices[datamodule.indices["train"]]
    assert target == {
        "task": "regression",
        "name": "price",
        "mean": pytest.approx(train.mean()),
        "std": pytest.approx(train.std()),
        "units": "EUR",
    }
    assert datamodule.splits["train"].targets.numpy() == pytest.approx(
        (train - train.mean()) / train.std(), abs=1e-6
    )
    # 40 distinct integers are a number too, unless they are named class labels.
    assert build_table(tmp_path, path, target="n")[0].contract.target.task == "regression"
    labels, _ = build_table(tmp_path, path, "data.task=classification", target="n")
    assert labels.contract.target.class_names[:3] == ["0", "1", "2"]


def test_text_in_a_target_the_model_learned_as_numbers_is_one_line():
    target = Target(name="price", mean=5.0, std=2.0)
    message = "target column 'price' holds text; the model was trained on numbers there"
    fails_with(message, encode_target, pd.Series(["cheap", "dear"]), target)


def test_a_class_the_model_was_not_trained_on_is_one_line():
    target = Classes(class_names=["a", "b"], name="kind")
    message = "target column 'kind' holds 'c' in 2 samples, a class the model was not trained on"
    fails_with(message, encode_classes, pd.Series(["a", "c", "b", "c"]), target)


def test_a_csv_marks_missing_numbers_and_dates_as_pandas_does_and_keeps_such_words(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text(
        "size,seen,region,kind\n"
        + "1.5,2024-03-01,NA,None\nNA,null,EU,a\n,2024-03-02,N/A,b\n3.5,,None,None\n" * 10
    )
    datamodule, _ = build_table(tmp_path, path)
    size, seen, region = datamodule.contract.preprocessing.columns
    # NA, null and the empty field are missing numbers and dates: they would be refused as text
    assert (size.kind, seen.kind, 1.5 < size.mean < 3.5) == ("numeric", "datetime", True)
    assert region.vocabulary == ["EU", "N/A", "NA", "None"]  # words in a column of words
    assert datamodule.contract.target.class_names == ["None", "a", "b"]


def test_a_column_with_no_name_in_the_header_is_left_out_unless_named(tmp_path, capsys):
    path = tmp_path / "data.csv"
    pd.read_csv(table(tmp_path)).to_csv(path)  # the row numbers first, under no name
    datamodule, _ = build_table(tmp_path, path)
    assert datamodule.contract.preprocessing.names == ["size", "colour"]
    assert (
        "note: left out 1 column with no name in the header (Unnamed: 0), as the row numbers "
        "that DataFrame.to_csv writes; give a column a name to learn from it"
    ) in capsys.readouterr().out
    named, _ = build_table(tmp_path, path, "data.features=['Unnamed: 0',size]")
    assert named.contract.preprocessing.names == ["Unnamed: 0", "size"]


def test_a_model_for_another_task_than_the_target_is_one_line(tmp_path):
    path = table(tmp_path, "data.parquet", price=np.linspace(1, 9, 40), stars=[1, 2, 3, 4] * 10)
    for overrides, target, message in [
        ([], "price", "Classifier is a classification model, but data 'price' is a regression"),
        (["model=regressor"], "kind", "Regressor is a regression model, but data 'kind' is a"),
        (["model=regressor"], "kind", "pass model=classifier: its classes are words, not numbers"),
        (["model=regressor"], "stars", "pass data.task=regression to predict it as a number"),
    ]:
        datamodule, cfg = build_table(tmp_path, path, *overrides, target=target)
        fails_with(message, build_model, cfg, datamodule)


@pytest.mark.slow  # a train.py process
def test_an_infinite_feature_stops_train_py_before_it_trains(tmp_path):
    path = table(tmp_path, weight=[1.0] * 5 + [np.inf] + [2.0] * 34)
    run = tmp_path / "run"
    result = run_cli("train.py", "data=table", f"data.path={path}", "data.target=kind",
                     f"hydra.run.dir={run}")  # fmt: skip
    assert result.returncode == 1 and not (run / "checkpoints").exists()
    assert result.stderr.strip().splitlines() == [
        f"error: {path} (data.features): column 'weight' holds inf in row 5 (infinite in 1 of "
        "40 rows), which would make the loss NaN: replace those by finite numbers, or leave "
        "them empty if missing"
    ]


def test_rows_without_a_target_are_dropped_when_asked(tmp_path, capsys):
    path = table(tmp_path, "data.parquet", gap=[None, "a", "b", "a"] * 10)
    datamodule, _ = build_table(tmp_path, path, "data.drop_missing_target=true", target="gap")
    assert "note: dropped 10 rows without a target (data.drop_missing_target=true)" in (
        capsys.readouterr().out
    )
    kept = np.concatenate(list(datamodule.indices.values()))
    assert sorted(kept) == list(range(30))  # positions among the 30 rows kept
    assert datamodule.contract.target.class_names == ["a", "b"]
    assert sum(len(split) for split in datamodule.splits.values()) == 30


def test_a_parquet_table_with_a_repeated_column_name_is_one_line(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = [pa.array([1.0, 2.0]), pa.array([3.0, 4.0]), pa.array(["a", "b"])]
    pq.write_table(pa.table(columns, names=["size", "size", "kind"]), tmp_path / "twice.pq")
    fails_with("twice.pq names column 'size' twice in its header", build_table, tmp_path,
               tmp_path / "twice.pq")  # fmt: skip


@pytest.mark.parametrize("separator", [";", "\t"])
def test_a_csv_separated_by_another_character_than_commas_is_one_line(tmp_path, separator):
    path = tmp_path / "data.csv"
    pd.read_csv(table(tmp_path)).to_csv(path, sep=separator, index=False)
    fails_with(f"data.csv separates its columns with {separator!r}, not commas", build_table,
               tmp_path, path)  # fmt: skip


def test_dates_and_times_become_the_numbers_of_their_parts(tmp_path):
    days = pd.date_range("2023-11-20", periods=40, freq="D")
    times = pd.Series(days + pd.to_timedelta(np.arange(40) * 7, "h"), dtype="datetime64[s]")
    parquet = table(tmp_path, "data.parquet", day=days, time=times.dt.tz_localize("UTC"))
    text = {"day": days.strftime("%d/%m/%Y"), "time": times.dt.strftime("%Y-%m-%d %H:%M")}
    csv = table(tmp_path, "data.csv", **text)
    (from_parquet, _), (from_csv, cfg) = [build_table(tmp_path, path) for path in (parquet, csv)]
    preprocessing = from_csv.contract.preprocessing
    parts = ["year", "month", "day", "day_of_week", "day_of_year"]
    assert preprocessing.features[5:] == [f"day.{part}" for part in parts] + [
        f"time.{part}" for part in [*parts, "hour", "minute"]
    ]
    day, time = preprocessing.columns[2:]
    assert (day.kind, day.format, time.format) == ("datetime", "%d/%m/%Y", "%Y-%m-%d %H:%M")
    assert cfg.data.num_features == 5 + 12  # not one feature per date
    # The page asks for a date, and for a date and a time.
    fields = {field["name"]: field for field in table_form(preprocessing)["fields"]}
    assert (fields["day"]["time"], fields["time"]["time"]) == (False, True)
    # Read from datetimes or from their text, the rows are the same numbers.
    assert from_parquet.splits["train"].inputs.equal(from_csv.splits["train"].inputs)
    train = from_csv.indices["train"]
    standardized = from_csv.splits["train"].inputs[:, 5].numpy()  # day.year
    years = days.year.to_numpy()[train]
    np.testing.assert_allclose(standardized * years.std() + years.mean(), years, rtol=1e-6)
    # Prediction rows: a date as the page sends it, text in the training format, a gap.
    rows = pd.DataFrame(
        {
            "size": [10.0] * 3,
            "colour": ["red"] * 3,
            "day": ["2024-01-05", "05/01/2024", None],
            "time": ["2024-01-05T14:30", "2024-01-05 14:30", None],
        }
    )
    encoded = encode_table(rows, preprocessing)
    np.testing.assert_array_equal(encoded[0], encoded[1])
    np.testing.assert_allclose(encoded[2, 5:], 0, atol=1e-6)  # missing: the training means
    fails_with(
        "rows: column 'day' holds 'Friday' in row 0, which is no date",
        encode_table,
        rows.assign(day="Friday"),
        preprocessing,
        "rows",
    )


def test_dates_that_read_day_first_too_are_read_month_first_with_a_note(tmp_path, capsys):
    days = pd.date_range("2024-01-01", periods=40, freq="6h")  # the 1st to the 10th
    datamodule, _ = build_table(tmp_path, table(tmp_path, seen=days.strftime("%d/%m/%Y %H:%M")))
    assert datamodule.contract.preprocessing.columns[-1].format == "%m/%d/%Y %H:%M"
    assert "note: column 'seen' holds dates such as '" in capsys.readouterr().out
    days = pd.date_range("2024-01-01", periods=40)  # the 13th and later: the day comes first
    datamodule, _ = build_table(tmp_path, table(tmp_path, seen=days.strftime("%d/%m/%Y")))
    assert datamodule.contract.preprocessing.columns[-1].format == "%d/%m/%Y"
    assert "note: column 'seen'" not in capsys.readouterr().out


def test_predict_reads_dates_as_the_model_was_trained_on_them(tmp_path):
    from {{ cookiecutter.package }}.tasks.export import export
    from {{ cookiecutter.package }}.tasks.train import train

    days = pd.Series(pd.date_range("2024-01-01", periods=60, freq="5D"))
    parquet = Path(table(tmp_path, "data.parquet", rows=60, day=days))
    run, exported = tmp_path / "run", tmp_path / "export"
    data = ["data=table", f"data.path={parquet}", "data.target=kind"]
    train(compose_config("train", run, [*data, *TINY]))
    last = run / "checkpoints" / "last.ckpt"
    export(compose_config("export", exported, [f"ckpt_path={last}", "formats=[onnx]",
                                               *FAST_LATENCY], quiet=False))  # fmt: skip
    manifest = json.loads((exported / "manifest.json").read_text())
    assert manifest["preprocessing"]["columns"][-1]["kind"] == "datetime"
    frame = pd.read_parquet(parquet)
    frame.assign(day=days.dt.strftime("%Y-%m-%d")).to_csv(csv := tmp_path / "rows.csv")
    frame.assign(day=days + pd.Timedelta(days=400)).to_parquet(later := tmp_path / "later.pq")
    predicted = [
        [entry["probability"] for entry in run_predict(exported, path, tmp_path / path.stem)]
        for path in (parquet, csv, later)
    ]
    assert len(predicted[0]) == 60 and predicted[0] == predicted[1]  # datetimes or their text
    assert predicted[2] != predicted[0]  # the dates reach the model


def test_encoding_holds_no_more_than_the_encoded_rows(tmp_path):
    """A column of 1,500 categories over 6,000 rows: the one-hot rows are 36 MB, and encoding
    them takes little more (no rows x vocabulary matrix besides)."""
    import tracemalloc

    random = np.random.default_rng(0)
    city = [f"city {index}" for index in random.integers(0, 1500, 6000)]
    path = table(tmp_path, "data.parquet", rows=6000, city=city)
    datamodule, _ = build_table(tmp_path, path)
    frame = pd.read_parquet(path)
    preprocessing = datamodule.contract.preprocessing
    tracemalloc.start()
    encoded = encode_table(frame, preprocessing)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert encoded.shape[1] > 1400 and peak < 1.1 * encoded.nbytes


def test_a_text_column_marked_categorical_is_not_parsed(tmp_path):
    path = table(tmp_path, age=["12", "about 12"] * 20)
    datamodule, _ = build_table(tmp_path, path, "data.categorical=[age]")
    assert datamodule.contract.preprocessing.columns[-1].vocabulary == ["12", "about 12"]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("data.xlsx", "a,b\n1,2\n", "data.xlsx is not a .csv, .parquet or .jsonl file"),
        ("missing.csv", None, "missing.csv does not exist"),
        ("empty.csv", "", "empty.csv holds no rows"),
        ("header.csv", "size,kind\n", "header.csv holds no rows"),
        ("broken.parquet", "not parquet", "broken.parquet is not a readable table"),
        ("twice.csv", "size,size,kind\n1,2,a\n", "twice.csv names column 'size' twice in its"),
        ("list.jsonl", '{"kind": "a"}\n\n[1, 2]\n', "list.jsonl line 3 is not a JSON object"),
    ],
)
def test_unreadable_table_files_give_one_line(tmp_path, name, content, message):
    if content is not None:
        (tmp_path / name).write_text(content)
    fails_with(message, build_table, tmp_path, tmp_path / name)
