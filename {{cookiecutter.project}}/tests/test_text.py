"""Texts (data=text): the tokenizer is fitted on the training split only, the same in every
process, and travels with the model into checkpoints and exports; a folder of .txt files per
class trains, exports, predicts without torch and serves; bad texts are one line."""

import json
import os
import random
import re
import shutil
import string
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, compose_config, run_cli, sentences, without_torch, write_texts
from servers import Server, call
from tokenizers import Tokenizer

from {{ cookiecutter.package }}.builders import build_datamodule
from {{ cookiecutter.package }}.console import UserError
from {{ cookiecutter.package }}.kinds import text


def write_csv(path: Path, rows: list[tuple[object, object]]) -> Path:
    import pandas as pd

    pd.DataFrame(rows, columns=["body", "label"]).to_csv(path, index=False)
    return path


def datamodule(tmp_path: Path, *overrides: str):
    return build_datamodule(compose_config("train", tmp_path, ["data=text", *overrides]))


def test_the_tokenizer_is_fitted_on_the_training_split_only(tmp_path):
    # Each text holds a word of its own, so the vocabulary shows which texts it was fitted on.
    rows = [
        (f"{sentence} zq{index}x", topic) for index, (sentence, topic) in enumerate(sentences(60))
    ]
    path = write_csv(tmp_path / "texts.csv", rows)
    module = datamodule(tmp_path, f"data.path={path}", "data.text=body", "data.target=label")
    vocabulary = Tokenizer.from_str(module.contract.preprocessing.tokenizer).get_vocab()
    for split, positions in module.indices.items():
        own = {f"zq{position}x" in vocabulary for position in positions}
        assert own == {split == "train"}, split
    preprocessing = module.contract.preprocessing
    assert (preprocessing.max_length, preprocessing.lowercase) == (128, True)
    assert preprocessing.normalization == "NFKC" and preprocessing.column == "body"


def test_the_same_texts_fit_the_same_tokenizer_in_every_process(tmp_path):
    # Each DDP rank fits its own tokenizer, and rank 0's goes into the checkpoint: all must be
    # one. Words of random letters tie many merges, which training breaks by token numbers.
    generator = random.Random(0)
    letters = string.ascii_lowercase
    words = ["".join(generator.choices(letters, k=generator.randint(3, 8))) for _ in range(3000)]
    texts = [" ".join(words[start : start + 10]) for start in range(0, len(words), 10)]
    path = tmp_path / "texts.json"
    path.write_text(json.dumps(texts))
    fit = (
        "import json, sys; from {{ cookiecutter.package }}.kinds import text; "
        "print(text.fit(json.loads(open(sys.argv[1]).read()), 'text', 300, 32).tokenizer)"
    )
    command = [sys.executable, "-c", fit, str(path)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    fitted = {
        subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
        for _ in range(3)
    }
    assert fitted == {text.fit(texts, "text", 300, 32).tokenizer + "\n"}


def test_a_vocabulary_smaller_than_the_texts_characters_is_one_line(tmp_path):
    # Each character is a token alone and continuing a word, whatever the limit: a network
    # sized by data.vocab_size would meet ids beyond its embedding in the first step.
    path = write_csv(tmp_path / "texts.csv", sentences(40))
    settings = [f"data.path={path}", "data.text=body", "data.target=label"]
    with pytest.raises(UserError, match=r"^data.vocab_size=20 is below the (\d+) tokens") as error:
        datamodule(tmp_path, *settings, "data.vocab_size=20")
    least = int(re.search(r"the (\d+) tokens", str(error.value))[1])
    module = datamodule(tmp_path, *settings, f"data.vocab_size={least}")
    assert module.contract.preprocessing.vocab_size == least


@pytest.mark.slow  # predict.py as a process, and a server
def test_a_text_model_predicts_files_without_torch_and_serves_texts(text_export, tmp_path):
    manifest = json.loads((text_export / "manifest.json").read_text())
    assert manifest["input"] == {
        "name": "input",
        "kind": "text",
        "shape": ["batch", "tokens"],  # any number of tokens, up to max_length
        "dtype": "int64",
    }
    texts = tmp_path / "texts"
    texts.mkdir()
    (texts / "a.txt").write_text("The rocket left its orbit for the moon.")
    (texts / "b.txt").write_text("Butter the bread, then the oven.")
    (tmp_path / "rows.jsonl").write_text(
        "\n".join(json.dumps({"text": t}) for t in ("Comet, star, galaxy", "Soup with pepper"))
    )
    classes = {}
    for name, source in (("folder", texts), ("rows", tmp_path / "rows.jsonl")):
        run = tmp_path / name
        result = run_cli(
            "predict.py",
            f"model={text_export}",
            f"input={source}",
            f"hydra.run.dir={run}",
            env=without_torch(tmp_path / f"blocker-{name}"),
        )
        assert result.returncode == 0, result.stderr[-2000:]
        predictions = json.loads((run / "predictions.json").read_text())["predictions"]
        classes[name] = [prediction["class"] for prediction in predictions]
    assert classes == {"folder": ["sky", "kitchen"], "rows": ["sky", "kitchen"]}

    (tmp_path / "server").mkdir()
    with Server(text_export, tmp_path / "server") as server:
        body = {"inputs": ["The rocket left its orbit for the moon.", "Soup with pepper"]}
        answer = call("POST", f"{server.url}/predict", json=body)
        assert answer.status == 200, answer.text
        assert [p["class"] for p in answer.json()["predictions"]] == ["sky", "kitchen"]
        rows = call(
            "POST", f"{server.url}/predict", json={"rows": [{"text": "Comet, star, galaxy"}]}
        )
        assert rows.status == 200 and rows.json()["predictions"][0]["class"] == "sky"
        for bad in ({"inputs": [""]}, {"inputs": [3]}, {"rows": [{"other": "column"}]}):
            refused = call("POST", f"{server.url}/predict", json=bad)
            assert refused.status == 422 and "\n" not in refused.json()["detail"], bad
        assert (
            "rows: row 0 has no 'text'; give each row the text column" in refused.json()["detail"]
        )
        undecodable = call(
            "POST",
            f"{server.url}/predict",
            data=b'{"inputs": ["\xff\xfe"]}',
            headers={"Content-Type": "application/json"},
        )
        assert undecodable.status == 400
        # JSON's escape of half a surrogate pair: valid JSON, no character for the tokenizer.
        half = call(
            "POST",
            f"{server.url}/predict",
            data=b'{"inputs": ["moon \\ud800"]}',
            headers={"Content-Type": "application/json"},
        )
        assert half.status == 422 and "half of a UTF-16 surrogate pair" in half.json()["detail"]
        page = call("GET", f"{server.url}/").text
        assert '"kind": "text"' in page


def test_the_exports_tokenizer_json_tokenizes_as_training_did_and_an_edit_is_refused(
    text_export, tmp_path
):
    from {{ cookiecutter.package }}.inference import load_export

    _, manifest = load_export(text_export)
    sentence = "The rocket left its orbit; a comet, unknown words: zyzzyva."
    tokenizer = Tokenizer.from_file(str(text_export / "tokenizer.json"))
    assert (
        tokenizer.encode(sentence).ids
        == text.encode([sentence], manifest.preprocessing)[0].tolist()
    )
    copy = tmp_path / "export"
    shutil.copytree(text_export, copy)
    tokenizer.enable_padding(length=8)  # another tokenizer than the model's
    tokenizer.save(str(copy / "tokenizer.json"))
    with pytest.raises(UserError, match="tokenizer.json is not the file that .* lists; export"):
        load_export(copy)


def test_a_long_text_is_cut_before_it_is_tokenized(text_export):
    manifest = json.loads((text_export / "manifest.json").read_text())
    preprocessing = text.Preprocessing.model_validate(manifest["preprocessing"])
    start = "star moon " * 10
    long = start + "x" * 10_000_000  # 10 MB: only its start can reach the model
    ids = text.encode([long, start], preprocessing)
    assert ids.shape == (2, 16) and (ids[0] == ids[1]).all()


def test_half_a_surrogate_pair_is_refused_before_the_tokenizer(text_export):
    manifest = json.loads((text_export / "manifest.json").read_text())
    preprocessing = text.Preprocessing.model_validate(manifest["preprocessing"])
    with pytest.raises(UserError, match=r"text 1 holds '\\ud800', half of a UTF-16 surrogate"):
        text.encode(["star moon", "star \ud800 moon"], preprocessing, "inputs")


@pytest.mark.parametrize(
    ("rows", "line"),
    [
        ([("star moon", "sky"), ("  ", "kitchen")], "empty text in 10 rows (the first: row 1)"),
        ([(3, "sky"), (4, "kitchen")], "column 'body' holds int values such as 3, not text"),
        ([("star moon", "sky"), ("bread soup", "sky")], "holds one class (sky); a classifier"),
    ],
)
def test_bad_texts_in_a_table_are_one_line(rows, line, tmp_path):
    path = write_csv(tmp_path / "texts.csv", rows * 10)
    with pytest.raises(UserError) as refused:
        datamodule(tmp_path, f"data.path={path}", "data.text=body", "data.target=label")
    assert line in str(refused.value) and "\n" not in str(refused.value)


def test_a_missing_column_and_bytes_that_are_not_utf8_are_one_line(tmp_path):
    path = write_csv(tmp_path / "texts.csv", [("star moon", "sky")] * 10)
    with pytest.raises(UserError, match="has no column 'words'; its columns: body, label"):
        datamodule(tmp_path, f"data.path={path}", "data.text=words", "data.target=label")
    root = write_texts(tmp_path / "texts", count=20)
    (root / "sky" / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(UserError, match=r"latin1.txt is not UTF-8 text \(byte 3 is 0xe9\)"):
        datamodule(tmp_path, f"data.root={root}")
    for suffix, rows in [
        (".csv", b"body,label\ncaf\xe9,sky\n"),
        (".jsonl", b'{"body": "caf\xe9"}\n'),
    ]:
        (path := tmp_path / f"latin1{suffix}").write_bytes(rows * 10)
        with pytest.raises(
            UserError, match=r"latin1\..* is not UTF-8 text \(it holds the byte 0xe9"
        ):
            datamodule(tmp_path, f"data.path={path}", "data.text=body", "data.target=label")


def test_a_text_column_that_is_also_the_target_is_one_line(tmp_path):
    path = write_csv(tmp_path / "texts.csv", [("star moon", "sky"), ("soup", "kitchen")] * 10)
    with pytest.raises(UserError, match="data.text and data.target both name column 'label'"):
        datamodule(tmp_path, f"data.path={path}", "data.text=label", "data.target=label")


def test_a_table_and_a_folder_of_texts_at_once_is_one_line(tmp_path):
    path = write_csv(tmp_path / "texts.csv", [("star moon", "sky"), ("soup", "kitchen")] * 10)
    both = [f"data.path={path}", "data.text=body", "data.target=label", f"data.root={tmp_path}"]
    with pytest.raises(UserError, match="are both set; data=text reads one: set the other"):
        datamodule(tmp_path, *both)


def test_rows_of_texts_without_a_target_are_refused_or_dropped_as_for_tables(tmp_path):
    rows = [("star moon", "sky"), ("bread soup", "kitchen"), ("moon soup", None)] * 10
    path = write_csv(tmp_path / "texts.csv", rows)
    overrides = [f"data.path={path}", "data.text=body", "data.target=label"]
    with pytest.raises(UserError, match="'label' is empty in 10 rows .* data.drop_missing_target"):
        datamodule(tmp_path, *overrides)
    kept = datamodule(tmp_path, *overrides, "data.drop_missing_target=true")
    assert sum(len(index) for index in kept.indices.values()) == 20
