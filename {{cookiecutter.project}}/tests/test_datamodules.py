"""Framework tests of every datamodule, run for each shipped data config on the example data, or
for your own with `pytest tests/test_datamodules.py --data=<name of configs/data/NAME.yaml>`:
the contract it declares, its splits, its augmentation and its DDP shards."""

import json
import random
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import ROOT, compose_config, contract_of, raw_samples

from {{ cookiecutter.package }}.builders import build_datamodule
from {{ cookiecutter.package }}.console import UserError
from {{ cookiecutter.package }}.data.base import SPLITS
from {{ cookiecutter.package }}.data.digits import DigitsDataModule
from {{ cookiecutter.package }}.kinds.image import normalize
from {{ cookiecutter.package }}.kinds.table import encode as encode_table
from {{ cookiecutter.package }}.kinds.text import encode as encode_texts

# What a batch's targets are, for each shipped task.
TARGET_DTYPES = {"classification": torch.long, "regression": torch.float32}


def build(data_overrides, tmp_path, *overrides):
    cfg = compose_config("train", tmp_path, [*data_overrides, *overrides])
    return build_datamodule(cfg), cfg


def from_raw(datamodule, split: str, positions: list[int]) -> tuple[np.ndarray, list[str]]:
    """The model inputs and labels of some samples, computed by kinds/ (numpy,
    Pillow, pandas and tokenizers: what predict and serve run) from the raw files or rows."""
    raw, labels = raw_samples(datamodule, split, positions)
    preprocessing = datamodule.contract.preprocessing
    if datamodule.contract.input.kind == "text":
        return encode_texts(list(raw[preprocessing.column]), preprocessing), labels
    if isinstance(raw, pd.DataFrame):
        return encode_table(raw, preprocessing), labels
    return normalize(raw, preprocessing), labels


def test_the_contract_is_plain_json_and_gives_the_shapes(data_overrides, tmp_path):
    datamodule, cfg = build(data_overrides, tmp_path)
    contract = contract_of(datamodule)
    assert json.loads(json.dumps(contract)) == contract
    assert type(datamodule.contract).from_dict(contract, "the test") == datamodule.contract
    inputs, targets = next(iter(datamodule.train_dataloader()))
    assert list(inputs.shape[1:]) == contract["input"]["shape"]
    # Values as float32, or token ids as int64 (texts); class indices, or a standardized value.
    assert str(inputs.dtype) == f"torch.{contract['input']['dtype']}"
    assert contract["input"]["dtype"] in ("float32", "int64")
    assert targets.dtype == TARGET_DTYPES[contract["target"]["task"]]
    # What the data knows is in the config that the model is built from.
    known = {key: value for key, value in datamodule.shapes.items() if value is not None}
    assert known and {key: cfg.data[key] for key in known} == known


def test_samples_are_what_preprocess_computes_from_the_raw_data(data_overrides, tmp_path):
    datamodule, _ = build(data_overrides, tmp_path)
    target = contract_of(datamodule)["target"]
    for split in ("val", "test"):
        dataset = datamodule.splits[split]
        positions = list(range(min(5, len(dataset))))
        expected, labels = from_raw(datamodule, split, positions)
        samples = [dataset[p] for p in positions]
        np.testing.assert_array_equal(np.stack([x.numpy() for x, _ in samples]), expected)
        if target["task"] == "regression":  # standardized, back in the target's units
            values = [float(y) * target["std"] + target["mean"] for _, y in samples]
            assert values == pytest.approx([float(label) for label in labels], rel=1e-5, abs=1e-4)
        else:
            assert [target["class_names"][int(y)] for _, y in samples] == labels


def test_splits_are_disjoint_and_reproducible_from_split_seed(data_overrides, tmp_path):
    first, again, other = (
        build(data_overrides, tmp_path, f"data.split_seed={seed}")[0] for seed in (7, 7, 8)
    )
    positions = np.concatenate([first.indices[name] for name in SPLITS])
    assert len(set(positions.tolist())) == len(positions)
    for name in SPLITS:
        assert len(first.splits[name]) == len(first.indices[name]) > 0
        np.testing.assert_array_equal(first.indices[name], again.indices[name])
    if first.hparams.get("root") and (Path(first.hparams.root) / "train").is_dir():
        return  # split by its folders, not at random
    assert any(not np.array_equal(first.indices[n], other.indices[n]) for n in SPLITS)


def test_only_training_samples_are_augmented(data_overrides, tmp_path):
    datamodule, _ = build(data_overrides, tmp_path)
    random.seed(0)
    for split in ("val", "test"):
        first, second = (datamodule.splits[split][0][0] for _ in range(2))
        assert torch.equal(first, second)
    draws = [datamodule.splits["train"][0][0] for _ in range(5)]
    varied = any(not torch.equal(draws[0], draw) for draw in draws[1:])
    assert varied == bool(datamodule.hparams.get("augment"))


@contextmanager
def recording(dataset):
    """Within the block, `dataset` writes down the index of every sample it is asked for."""
    reads, base = [], type(dataset)

    class Recorded(base):
        def __getitem__(self, index):
            reads.append(int(index))
            return super().__getitem__(index)

    if hasattr(base, "__getitems__"):  # whole batches at a time

        def getitems(self, indices):
            reads.extend(indices)
            return base.__getitems__(self, indices)

        Recorded.__getitems__ = getitems
    dataset.__class__ = Recorded
    try:
        yield reads
    finally:
        dataset.__class__ = base


@pytest.mark.parametrize("world_size", [2, 3])
def test_each_ddp_rank_reads_only_its_shard(data_overrides, tmp_path, monkeypatch, world_size):
    # In one process, as DDP rank r of world_size: the loaders' samplers ask torch.distributed.
    # No worker processes, so that this process sees every read; workers read what it asks.
    datamodule, _ = build(data_overrides, tmp_path, "data.num_workers=0")
    monkeypatch.setattr(torch.distributed, "is_available", lambda: True)
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda group=None: world_size)
    for split in SPLITS:
        size, shards = len(datamodule.splits[split]), []
        for rank in range(world_size):
            monkeypatch.setattr(torch.distributed, "get_rank", lambda group=None, r=rank: r)
            loader = datamodule.loader(split)
            with recording(loader.dataset) as reads:
                batches = sum(1 for _ in loader)
            assert reads == list(loader.sampler) and batches == len(loader)
            shards.append(reads)
        assert sorted(set().union(*shards)) == list(range(size))
        if split == "train":  # every rank as many samples, padded with repeats
            assert {len(shard) for shard in shards} == {-(-size // world_size)}
        else:  # each sample exactly once
            assert sorted(sum(shards, [])) == list(range(size))


@pytest.mark.slow  # a pytest process of its own, which imports torch
def test_a_data_name_without_its_config_stops_pytest_in_one_line():
    command = [sys.executable, "-m", "pytest", __file__, "--data=nope", "-p", "no:cacheprovider"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == pytest.ExitCode.USAGE_ERROR
    line = "ERROR: --data=nope: there is no configs/data/nope.yaml; choose from digits,"
    assert result.stderr.startswith(line) and "Traceback" not in result.stderr


class ForgetsToReturn(DigitsDataModule):
    def fit(self, samples):
        super().fit(samples)  # the contract made, and not returned


class TwoSplits(DigitsDataModule):
    def apply(self, samples, contract):
        splits = super().apply(samples, contract)
        return {"train": splits["train"], "val": splits["val"]}  # no test split


def test_a_datamodule_of_ones_own_that_breaks_a_step_is_told_which_in_one_line(monkeypatch):
    """The base's three steps, broken as a first draft may break them (the digits underneath)."""
    cases = [
        (ForgetsToReturn, "ForgetsToReturn.fit returned None; it returns the contract that "),
        (TwoSplits, "TwoSplits.apply returned a dict of train, val; it returns a dict of a "),
    ]
    for datamodule, line in cases:
        with pytest.raises(UserError) as error:
            built = datamodule()
            built.setup()
            built.test_dataloader()
        assert str(error.value).startswith(line)
    monkeypatch.delattr(DigitsDataModule, "kind")
    with pytest.raises(UserError, match="DigitsDataModule names no input kind: set kind = "):
        DigitsDataModule().setup()


def test_the_digits_refuse_a_model_trained_on_other_images_in_one_line():
    digits = DigitsDataModule()
    digits.setup()
    trained = digits.contract.to_dict()  # as if the model had learned from 16 x 16 images
    trained["input"]["shape"], trained["preprocessing"]["image_size"] = [1, 16, 16], 16
    with pytest.raises(UserError, match="^the digits are 1 x 8 x 8 images and the model takes"):
        DigitsDataModule(contract=trained).setup()
