"""Texts: a WordPiece tokenizer (Hugging Face `tokenizers`) fitted on the training texts turns
each text into `max_length` token ids, cut or padded with id 0. tokenizers, numpy and pandas
(for tables of texts) only: predict and serve tokenize exactly as training did."""

import re
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import numpy as np
from pydantic import ConfigDict, Field, StrictStr, create_model

from ..console import UserError, counted
from ..contract import Preprocessing as BasePreprocessing
from . import TABLE_SUFFIXES

if TYPE_CHECKING:  # tables of texts only
    import pandas as pd

DTYPE = "int64"
TEXT_SUFFIX = ".txt"
PAD, UNKNOWN = "[PAD]", "[UNK]"  # ids 0 and 1
# A token is rarely longer than this many characters: a text is cut to max_length times it
# before tokenizing, so a text of megabytes costs what a text of a few pages does.
CHARS_PER_TOKEN = 32
SURROGATE = re.compile("[\ud800-\udfff]")
UPLOAD = None  # no file uploads
REQUEST = 'texts: send JSON {"inputs": ["a text", ...]} or {"rows": [{"<column>": "a text"}]}'
Normalization = Literal["NFC", "NFD", "NFKC", "NFKD"]
# The exported models take texts of any number of tokens up to max_length; predict and serve
# pad to max_length, as training did.
DYNAMIC_AXES = {0: "tokens"}


class Preprocessing(BasePreprocessing):
    """The fitted tokenizer (tokenizers' JSON, cutting and padding included), the settings it
    was fitted with, and the column texts come from in a table."""

    column: str
    tokenizer: str
    vocab_size: int
    max_length: int
    lowercase: bool
    normalization: Normalization


def input_shape(preprocessing: Preprocessing) -> list[int]:
    return [preprocessing.max_length]


# Fitting


def fit(
    texts: list[str],
    column: str,
    vocab_size: int,
    max_length: int,
    lowercase: bool = True,
    normalization: Normalization = "NFKC",
) -> Preprocessing:
    """A WordPiece tokenizer of at most `vocab_size` tokens, fitted on `texts` (the training
    split's), that cuts and pads every text to `max_length` ids. The same texts give the same
    tokenizer in every process, so each DDP rank fits the one rank 0 saves."""
    from tokenizers import trainers

    texts = cut(texts, max_length)
    trained = untrained(lowercase, normalization)
    # tokenizers numbers each "##" continuation token when it first meets it in a hash map,
    # in an order that changes from process to process, and breaks ties between merges by
    # those numbers (tokenizers issue 1794): numbered first, in sorted order, as the trainer's
    # special tokens, they make the vocabulary depend on the texts alone.
    special = [PAD, UNKNOWN, *continuations(trained, texts)]
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=special, show_progress=False
    )
    trained.train_from_iterator(texts, trainer)
    # Every character, alone and continuing a word, is a token whatever the limit: a network
    # sized by data.vocab_size would meet ids beyond its embedding.
    if (least := trained.get_vocab_size()) > vocab_size:
        raise UserError(
            f"data.vocab_size={vocab_size} is below the {least} tokens that these texts' "
            f"characters take alone; set data.vocab_size to {least} or more"
        )
    # Only the padding and unknown tokens stay special: "##s" in a text is text.
    tokenizer = untrained(lowercase, normalization)
    tokenizer.model = trained.model
    tokenizer.add_special_tokens([PAD, UNKNOWN])
    tokenizer.enable_truncation(max_length)
    tokenizer.enable_padding(pad_id=0, pad_token=PAD, length=max_length)
    return Preprocessing(
        column=column,
        tokenizer=tokenizer.to_str(),
        vocab_size=tokenizer.get_vocab_size(),
        max_length=max_length,
        lowercase=lowercase,
        normalization=normalization,
    )


def untrained(lowercase: bool, normalization: Normalization):
    """A WordPiece tokenizer with its normalization and pre-tokenization, and no vocabulary."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    steps = [getattr(normalizers, normalization)()]
    tokenizer = Tokenizer(models.WordPiece(unk_token=UNKNOWN))
    tokenizer.normalizer = normalizers.Sequence(
        steps + [normalizers.Lowercase()] if lowercase else steps
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tokenizer


def continuations(tokenizer, texts: list[str]) -> list[str]:
    """The continuation tokens WordPiece training makes, sorted: "##c" for each character c of
    the normalized texts that can follow another within a word (and the few that only start
    words, each at the cost of a place in the vocabulary)."""
    # One string, in one call: a line break joins no characters in normalization.
    characters = set(tokenizer.normalizer.normalize_str("\n".join(texts)))
    # The pre-tokenizer says which characters end a word (spaces, punctuation): a character
    # that does not splits no word it is in.
    split = tokenizer.pre_tokenizer.pre_tokenize_str
    return [f"##{char}" for char in sorted(characters) if len(split(f"a{char}a")) == 1]


# Encoding


@lru_cache(maxsize=4)
def tokenizer_of(serialized: str):
    from tokenizers import Tokenizer

    return Tokenizer.from_str(serialized)


def cut(texts: list[str], max_length: int) -> list[str]:
    limit = max_length * CHARS_PER_TOKEN
    return [text[:limit] for text in texts]


def encode(texts: list[str], preprocessing: Preprocessing, source: str = "the texts"):
    """Token ids (N, max_length) int64; an empty text is refused, naming its place."""
    limit = preprocessing.max_length * CHARS_PER_TOKEN  # what cut() keeps
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise UserError(f"{source}: text {index} is {text!r}, not text")
        if not text.strip():
            raise UserError(f"{source}: text {index} is empty; give every sample some text")
        # JSON's \ud800 escape gives one half of a UTF-16 pair, which no tokenizer takes.
        if half := SURROGATE.search(text, 0, limit):
            raise UserError(
                f"{source}: text {index} holds {half[0]!r}, half of a UTF-16 surrogate pair and "
                "no character; send whole characters"
            )
    tokenizer = tokenizer_of(preprocessing.tokenizer)
    encodings = tokenizer.encode_batch(cut(texts, preprocessing.max_length))
    return np.array([encoding.ids for encoding in encodings], dtype=np.int64).reshape(
        len(texts), preprocessing.max_length
    )


def text_column(
    frame: "pd.DataFrame", column: str, source: str, fix: str = "pass data.text=<a column of text>"
) -> list[str]:
    """The texts of `column`, refused in one line if it is missing or holds something else
    (`fix`: what to do about values that are not text)."""
    if column not in frame.columns:
        raise UserError(
            f"{source} has no column {column!r}; its columns: {', '.join(map(str, frame))}"
        )
    values = frame[column]
    missing = values.isna()
    if missing.any():
        raise UserError(
            f"{source}: column {column!r} is empty in {counted(missing.sum(), 'row')} (the first: "
            f"row {missing.idxmax()}); fill them or drop those rows"
        )
    wrong = [value for value in values if not isinstance(value, str)]
    if wrong:
        raise UserError(
            f"{source}: column {column!r} holds {type(wrong[0]).__name__} values such as "
            f"{wrong[0]!r}, not text; {fix}"
        )
    empty = values.str.strip() == ""
    if empty.any():
        raise UserError(
            f"{source}: column {column!r} holds an empty text in {counted(empty.sum(), 'row')} "
            f"(the first: row {empty.idxmax()}); give every sample some text, or drop those rows"
        )
    return list(values)


# Reading files


def read_text(path: Path) -> str:
    """A .txt file as UTF-8 text; other bytes are refused, naming where they start."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise UserError(
            f"{path} is not UTF-8 text (byte {error.start} is {data[error.start]:#x}); save it "
            "as UTF-8"
        ) from None


def text_files(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob(f"*{TEXT_SUFFIX}") if path.is_file())


def read_inputs(path: Path, preprocessing: Preprocessing) -> tuple[np.ndarray, list[dict]]:
    """A .txt file, a folder of them (and its subfolders), or a table with the text column."""
    if path.is_file() and path.suffix.lower() in TABLE_SUFFIXES:
        from .table import read_table  # pandas, for a table of texts only

        trained = "the model was trained on texts there"
        texts = text_column(read_table(path), preprocessing.column, str(path), trained)
        sources = [{"file": str(path), "index": index} for index in range(len(texts))]
        return encode(texts, preprocessing, str(path)), sources
    files = [path] if path.is_file() and path.suffix.lower() == TEXT_SUFFIX else []
    if path.is_dir():
        files = text_files(path)
    if not files:
        raise UserError(
            f"input={str(path)!r} is not a .txt file, a folder of them or a table "
            f"({', '.join(TABLE_SUFFIXES)}) with the column {preprocessing.column!r}"
        )
    inputs = np.concatenate([encode([read_text(f)], preprocessing, str(f)) for f in files])
    return inputs, [{"file": str(file), "index": None} for file in files]


def from_arrays(array: np.ndarray, preprocessing: Preprocessing, source: str) -> np.ndarray:
    """Texts as an array of strings (a .npy file of them)."""
    if array.dtype.kind != "U" or array.ndim > 1:
        raise UserError(
            f"{source} holds {array.dtype} values of shape {array.shape}; expected texts"
        )
    return encode([str(text) for text in np.atleast_1d(array)], preprocessing, source)


# Requests and the page


def json_forms(preprocessing: Preprocessing) -> dict:
    """Texts, or rows that hold the text column (other columns may come too)."""
    config = ConfigDict(extra="allow", strict=True)
    row = create_model(
        "Row",
        __config__=config,
        __doc__="One row, with the text column.",
        text=(StrictStr, Field(alias=preprocessing.column, title=preprocessing.column)),
    )
    return {
        "inputs": Annotated[list[StrictStr], Field(min_length=1)],
        "rows": Annotated[list[row], Field(min_length=1)],  # type: ignore[valid-type]
    }


def from_json(payload: dict, preprocessing: Preprocessing) -> np.ndarray:
    if "inputs" in payload:
        texts = payload["inputs"]
    else:
        rows = payload.get("rows")
        if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
            raise UserError(f"this model takes {REQUEST}")
        lacking = [index for index, row in enumerate(rows) if preprocessing.column not in row]
        if lacking:
            raise UserError(
                f"rows: row {lacking[0]} has no {preprocessing.column!r}; give each row the "
                "text column the model was trained on"
            )
        texts = [row[preprocessing.column] for row in rows]
    if not isinstance(texts, list) or not texts:
        raise UserError(f"this model takes {REQUEST}")
    return encode(texts, preprocessing, "inputs" if "inputs" in payload else "rows")


def form(preprocessing: Preprocessing) -> dict:
    return {
        "type": "fields",
        "fields": [{"name": preprocessing.column, "kind": "text"}],
        "about": f"Input: a text, read as its first {preprocessing.max_length} tokens.",
    }


def check(preprocessing: Preprocessing, shape: list, where: str) -> None:
    if shape != list(DYNAMIC_AXES.values()):
        raise UserError(
            f"{where} feeds texts of up to {preprocessing.max_length} tokens, the model takes "
            f"{shape}"
        )
    try:
        tokenizer = tokenizer_of(preprocessing.tokenizer)
    except Exception as error:  # tokenizers raises its own exception type for any bad JSON
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise UserError(f"{where} holds no readable tokenizer: {reason}") from None
    if tokenizer.get_vocab_size() != preprocessing.vocab_size:
        raise UserError(
            f"{where} has vocab_size {preprocessing.vocab_size}, its tokenizer "
            f"{tokenizer.get_vocab_size()} tokens"
        )


def files(preprocessing: Preprocessing) -> dict[str, str]:
    """The tokenizer as the tokenizers library saves it: any runtime with tokenizers (or
    transformers' PreTrainedTokenizerFast) tokenizes as training did."""
    return {"tokenizer.json": preprocessing.tokenizer}
