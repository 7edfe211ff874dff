"""Each command's options, declared once with their types and ranges, and the one line a user gets
for the first option that breaks them. Their defaults, and what each is for, stay in configs/,
where users edit them; these classes say only what a value may be.

Types are strict: `1.5` or `true` is no whole number, `true` no number, and nothing is rounded.
No torch here: predict and serve use it too.
"""

import os
import sys
from dataclasses import dataclass
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from typing_extensions import TypedDict  # pydantic reads TypedDict from here before Python 3.12

from .console import UserError

Format = Literal["onnx", "torchscript", "torch_export", "onnx_int8", "onnx_optimized", "triton"]
FORMATS: tuple[str, ...] = get_args(Format)
CHOOSE_FORMAT = "choose from " + ", ".join(FORMATS)
# Made from model.onnx: written after it.
FROM_ONNX = ("onnx_int8", "onnx_optimized", "triton")
# torch's dynamo exporter writes opset 18 and converts the graph to a newer one if asked; an
# older one fails to convert, with a traceback but no error.
OLDEST_OPSET = 18
# The longest a batch may wait for more requests: far beyond what batching gains.
MOST_BATCH_TIMEOUT = 1


def usable_cores() -> int:
    """The cores this process may use."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity else os.cpu_count() or 1


def open_file_limit() -> int | None:
    """The most files and sockets this process may hold open (`ulimit -n`); None where the system
    sets no such limit or Python cannot read it."""
    try:
        import resource  # Unix only
    except ImportError:
        return None
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


@dataclass(frozen=True)
class Refusal:
    """The line for a value that an option refuses, where the one its type and range give would
    say too little. `{setting}` stands for name=value as on the command line, `{value}` for the
    value alone."""

    line: str


def whole(lowest: int, highest: int | None = None) -> Any:
    """A whole number from `lowest` (up to `highest`)."""
    within = f"of at least {lowest}" if highest is None else f"from {lowest} to {highest}"
    return Field(strict=True, ge=lowest, le=highest, description=f"a whole number {within}")


def number(below: float | None = None, noun: str = "a number", example: str = "") -> Any:
    """A number, whole or not, from 0 (to below `below`)."""
    within = ", 0 or more" if below is None else f" from 0 to below {below}"
    example = f", e.g. {example}" if example else ""
    # Infinity passes `ge=0`, and would turn off what the number bounds (atol: every check).
    return Field(
        strict=True, ge=0, lt=below, allow_inf_nan=False, description=f"{noun}{within}{example}"
    )


class Options(BaseModel):
    # Only the options declared here: the rest of a command's config is Hydra's and the paths'.
    # A path that Hydra reads as a number (input=2024) is still a path. `model_path` is no
    # pydantic attribute, whatever older pydantic versions warn.
    model_config = ConfigDict(
        extra="ignore", frozen=True, coerce_numbers_to_str=True, protected_namespaces=()
    )


Fraction = Annotated[float, number(below=1, noun="a fraction", example="0.15")]
# Hydra reads `no`, `yes`, `off` and `on` as words, and any word counts as true.
Switch = Annotated[bool, Field(strict=True), Refusal("{setting} must be true or false")]


def low_to_high(pair: tuple[float, float]) -> tuple[float, float]:
    if pair[0] > pair[1]:
        raise ValueError("low to high")  # the user reads the setting's line
    return pair


AreaFraction = Annotated[float, Field(strict=True, gt=0, le=1)]
Ratio = Annotated[float, Field(strict=True, gt=0)]


class Augment(TypedDict, total=False):
    """How the image datamodule augments training images (data/images.py)."""

    # How pydantic 2.5 (the oldest this project takes) configures a TypedDict; not a field.
    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    crop_scale: Annotated[
        Annotated[tuple[AreaFraction, AreaFraction], AfterValidator(low_to_high)] | None,
        Refusal(
            "{setting} must be two fractions of the image's area, low to high, above 0 and at "
            "most 1: e.g. [0.7,1.0]"
        ),
    ]
    crop_ratio: Annotated[
        Annotated[tuple[Ratio, Ratio], AfterValidator(low_to_high)] | None,
        Refusal(
            "{setting} must be two aspect ratios (width / height), low to high, above 0: e.g. "
            "[0.75,1.333]"
        ),
    ]
    flip: Switch


def crops_with_both(augment: Augment) -> Augment:
    if bool(augment.get("crop_scale")) != bool(augment.get("crop_ratio")):
        raise ValueError(
            "data.augment.crop_scale and data.augment.crop_ratio go together: set both, or both "
            "to null for no cropping"
        )
    return augment


AUGMENT = Annotated[Augment, AfterValidator(crops_with_both)]


class ImageShape(TypedDict):
    """What the image datamodule reads images as (data/images.py); None reads it off them."""

    channels: Annotated[
        Literal[1, 3, None],
        Refusal(
            "{setting} must be 1 (greyscale) or 3 (colour), or null to read it off the images"
        ),
    ]
    image_size: Annotated[
        Annotated[int, Field(strict=True, ge=1)] | None,
        Refusal(
            "{setting} must be the side images are resized to, a whole number of pixels, or "
            "null to read it off the images"
        ),
    ]


class Columns(TypedDict):
    """The columns of a table the model reads (data/table.py): a single name would be read
    letter by letter, and none would leave the model nothing to learn from."""

    features: Annotated[
        Annotated[list, Field(min_length=1)] | None,
        Refusal(
            "{setting} must be a list of column names, e.g. data.features=[age,income], or null "
            "for every column but the target"
        ),
    ]
    categorical: Annotated[
        list | None,
        Refusal(
            "{setting} must be a list of column names, e.g. data.categorical=[colour], or [] "
            "for none"
        ),
    ]


class DataOptions(TypedDict, total=False):
    """What the shipped datamodules take, checked before one is built (a DataLoader or a split
    would fail on it later, with a traceback). A datamodule of the user's own may leave any out."""

    batch_size: Annotated[int, whole(1)]
    num_workers: Annotated[int, whole(0)]
    task: Literal["classification", "regression", None]
    drop_missing_target: Switch
    val_fraction: Fraction
    test_fraction: Fraction
    # Texts: the tokenizer's size (its two special tokens and at least one more), and the tokens
    # a text is cut or padded to.
    vocab_size: Annotated[int, whole(3)]
    max_length: Annotated[int, whole(1)]
    lowercase: Switch
    normalization: Literal["NFC", "NFD", "NFKC", "NFKD"]


def leaves_data_to_train_on(data: DataOptions) -> DataOptions:
    """What the two fractions leave: validation data to watch, test data, and data to train on."""
    if data.get("val_fraction") == 0:
        raise ValueError(
            "data.val_fraction=0 leaves no validation data for checkpoints and early stopping to "
            "watch: e.g. data.val_fraction=0.15"
        )
    if data.get("test_fraction") == 0:
        raise ValueError(
            "data.test_fraction=0 leaves no test data, which the test after training, eval and "
            "export's checks read (test=false skips only the first): e.g. data.test_fraction=0.15"
        )
    fractions = {name: data[name] for name in ("val_fraction", "test_fraction") if name in data}
    if sum(fractions.values()) >= 1:
        settings = " and ".join(f"data.{name}={value}" for name, value in fractions.items())
        raise ValueError(f"{settings} leave nothing to train on: keep their sum below 1")
    return data


DATA = Annotated[DataOptions, AfterValidator(leaves_data_to_train_on)]


class Latency(Options):
    warmup: Annotated[int, whole(0)]
    repeats: Annotated[int, whole(1)]


class Triton(Options):
    max_batch_size: Annotated[int, whole(1)]
    max_queue_delay_microseconds: Annotated[int, whole(0)]


class TrainOptions(Options):
    test: Switch
    auto_resume: Switch


class Watched(TypedDict, total=False):
    """What a model config declares for checkpointing, early stopping and sweeps to watch: a
    model of the user's own may leave them to its callbacks' configs."""

    monitor: str
    mode: Literal["min", "max"]


def check_train_options(cfg: Any) -> None:
    validated(TrainOptions, cfg)
    validated(Watched, cfg.model, prefix="model.")


def database_url(url: str | None) -> str | None:
    """A URL whose database SQLAlchemy knows (it loads the dialect, not the driver); for a
    SQLite file, in a folder that exists."""
    if url is not None:
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError

        try:
            parsed = make_url(url)
            parsed.get_dialect()
        except (ArgumentError, NoSuchModuleError) as error:
            raise ValueError(str(error)) from None  # the user reads the setting's line
        file = parsed.database if parsed.get_backend_name() == "sqlite" else None
        if file and file != ":memory:" and not os.path.isdir(os.path.dirname(file) or "."):
            raise ValueError("no such folder")
    return url


Direction = Literal["minimize", "maximize"]


class OptunaSweep(Options):
    """What Optuna's sweeper takes (configs/hparams_search/optuna.yaml), checked before it
    creates its study, where a mistake ends in a traceback."""

    direction: Annotated[
        Direction | list[Direction],
        Refusal(
            "{setting} must be minimize or maximize; hparams_search=optuna reads it off "
            "model.mode, min or max"
        ),
    ]
    n_jobs: Annotated[int, whole(1)]
    storage: Annotated[
        str | None,
        AfterValidator(database_url),
        Refusal(
            "{setting} must be a database URL, e.g. sqlite:///logs/optuna.db (in a folder that "
            "exists), or null to keep the study in memory"
        ),
    ]


class EvalOptions(Options):
    ckpt_path: Annotated[
        str,
        Field(min_length=1),
        Refusal("eval needs a checkpoint: pass ckpt_path=<path to a .ckpt file>"),
    ]


# A number of bytes as LitData reads it, with its unit (B, K or KB, M or MB, G or GB, T or TB).
Size = Annotated[
    str,
    Field(pattern=r"(?i)^\s*\d+(\.\d+)?\s*([kmgt]b?|b)\s*$"),
    Refusal("{setting} must be a size with its unit, as LitData reads it: e.g. 64MB"),
]


class StreamSettings(TypedDict):
    """What the stream's datamodule hands LitData (data/stream.py), which checks it only once a
    loader starts."""

    max_cache_size: Size


class OptimizeOptions(Options):
    output_dir: Annotated[
        str,
        Field(min_length=1),
        Refusal("optimize needs a destination: pass output_dir=<folder or s3://bucket/prefix>"),
    ]
    # null: one worker process per core
    num_workers: Annotated[int, whole(1)] | None = None
    chunk_bytes: Size


# Empty, a folder would be the working directory, the project's own.
OutputDir = Annotated[
    str,
    Field(min_length=1),
    Refusal("{setting} names no folder; pass one, or leave output_dir out for the run's folder"),
]


class ExportOptions(Options):
    ckpt_path: Annotated[
        str,
        Field(min_length=1),
        Refusal("export needs a checkpoint: pass ckpt_path=<path to a .ckpt file>"),
    ]
    formats: Annotated[
        list[
            Annotated[
                Format,
                Refusal("unknown format {value!r} in formats; " + CHOOSE_FORMAT),
            ]
        ],
        Field(min_length=1),
        Refusal("{setting} must be a list of formats, e.g. formats=[onnx]; " + CHOOSE_FORMAT),
    ]
    torchscript_method: Literal["trace", "script"]
    # The newest opset is the installed onnx's: a fact the export command passes in.
    opset: Annotated[
        int,
        Field(
            strict=True,
            ge=OLDEST_OPSET,
            description=f"a whole number from {OLDEST_OPSET} (what torch's exporter writes) to "
            "{newest_opset} (the newest this onnx knows)",
        ),
    ]
    atol: Annotated[float, number(example="atol=1e-4")]
    latency: Latency
    batch_sizes: Annotated[
        list[Annotated[int, Field(strict=True, gt=0)]],
        Field(min_length=1, description="positive whole numbers"),
    ]
    max_metric_drop: Annotated[
        float,
        number(noun="a number of points", example="0.5, half a percentage point of accuracy"),
    ]
    calibration_samples: Annotated[int, whole(1)]
    triton: Triton
    output_dir: OutputDir

    @field_validator("opset")
    @classmethod
    def known_to_onnx(cls, opset: int, info: ValidationInfo) -> int:
        if opset > (info.context or {})["newest_opset"]:
            raise ValueError("newer than onnx knows")  # the user reads the field's description
        return opset

    @model_validator(mode="after")
    def onnx_listed_for_its_variants(self) -> "ExportOptions":
        repeated = next((name for name in self.formats if self.formats.count(name) > 1), None)
        if repeated:
            raise ValueError(f"formats names {repeated} twice; name each format once")
        derived = [name for name in self.formats if name in FROM_ONNX]
        if derived and "onnx" not in self.formats:
            raise ValueError(
                f"{derived[0]} is made from model.onnx: add onnx to formats, e.g. "
                f"formats=[onnx,{','.join(derived)}]"
            )
        return self


PREDICT_NEEDS = Refusal(
    "predict needs model=<export dir> and input=<.npy, .csv, .parquet or .jsonl file, image or "
    "folder>"
)


class PredictOptions(Options):
    model_path: Annotated[str, Field(min_length=1), PREDICT_NEEDS]
    input: Annotated[str, Field(min_length=1), PREDICT_NEEDS]
    variant: str
    top_k: Annotated[int, whole(1)]
    invalid_inputs: Literal["error", "mark"]
    output_dir: OutputDir


class ServeOptions(Options):
    model_path: Annotated[str, Field(min_length=1), Refusal("serve needs model=<export dir>")]
    variant: str
    # This machine only, or every IPv4 or IPv6 interface.
    host: Annotated[
        Literal["127.0.0.1", "0.0.0.0", "::"],
        Refusal(
            "{setting}: choose 127.0.0.1 (this machine only), 0.0.0.0 or :: (every interface, "
            "as in a container)"
        ),
    ]
    port: Annotated[int, whole(1024, 65535)]
    workers: Annotated[int, whole(1)]
    threads: Annotated[int, whole(1)]
    max_batch_size: Annotated[int, whole(1)]
    batch_timeout: Annotated[float, number(below=MOST_BATCH_TIMEOUT, noun="seconds")]
    max_request_bytes: Annotated[int, whole(1)]
    max_request_samples: Annotated[int, whole(1)]
    # Seconds to receive a request's headers, then its body; connections held per process.
    read_timeout: Annotated[
        float, Field(strict=True, gt=0, description="seconds, a number above 0, e.g. 10")
    ]
    max_connections: Annotated[int, whole(1)]
    api_key_env: str | None
    log_level: Literal["critical", "error", "warning", "info", "debug", "trace"]

    @model_validator(mode="after")
    def fits_the_machine(self) -> "ServeOptions":
        cores = usable_cores()
        if self.workers * self.threads > cores:
            raise ValueError(
                f"workers={self.workers} x threads={self.threads} onnxruntime threads would "
                f"share {cores} cores; lower workers or threads"
            )
        # Each connection holds a socket: at the limit the server stops accepting for seconds at
        # a time, with errors in its log, instead of answering 503.
        limit = open_file_limit()
        if limit is not None and self.max_connections >= limit:
            raise ValueError(
                f"max_connections={self.max_connections} must be below the open files a process "
                f"may hold here, {limit} (ulimit -n): lower it, or raise the limit"
            )
        return self


def check_seconds(value: Any, setting: str) -> float:
    """A time interval of a callback: seconds, 0 or more."""
    if type(value) not in (int, float) or not value >= 0:  # and NaN
        raise UserError(f"{setting}={value} must be seconds, 0 or more")
    return value


def check_seed(seed: Any) -> None:
    """None draws a seed."""
    if seed is not None and (type(seed) is not int or not 0 <= seed < 2**32):
        raise UserError(f"seed={seed} must be a whole number from 0 to {2**32 - 1}, e.g. seed=42")


def validated(kind: Any, section: Any, prefix: str = "", **facts: Any) -> Any:
    """The options of `kind` (a class above, or DATA) that `section` of a config gives, checked
    and typed. The first that breaks its type, range or a rule across options is one line;
    `facts` are what a range depends on that only the command knows."""
    # Options that take no others are given every key, to name one they lack.
    closed = getattr(split(kind)[0], "__pydantic_config__", {}).get("extra") == "forbid"
    names = list(section) if closed else [name for name in fields(kind) if name in section]
    given = {name: plain(section[name]) for name in names}
    try:
        return TypeAdapter(kind).validate_python(given, context=facts)
    except ValidationError as error:
        raise UserError(refusal(kind, error.errors()[0], given, prefix, facts)) from None


def refusal(kind: Any, error: Any, given: dict, prefix: str, facts: dict) -> str:
    if not error["loc"]:  # a rule across options says it all
        return str(error["ctx"]["error"])
    # Each option on the way to the refused value, outermost first. The innermost that has a line
    # of its own says it: an unknown format names itself, a batch size below 1 is the list's.
    levels, annotation = [], kind
    names: list[str] = []
    value: Any = given
    for key in error["loc"]:
        base = split(annotation)[0]
        if get_origin(base) in (Union, UnionType):  # the rest names a member: the union's line
            break
        if isinstance(key, str) and key not in fields(base):  # options that take no others
            known = ", ".join(fields(base))
            return f"{prefix}{'.'.join([*names, key])} is not a setting; choose from {known}"
        annotation = fields(base)[key] if isinstance(key, str) else get_args(base)[0]
        names += [key] if isinstance(key, str) else []
        value = value.get(key) if isinstance(value, dict) else value[key]
        levels.append((line_of(annotation), f"{prefix}{'.'.join(names)}={value}", value))
    line, setting, value = next((level for level in reversed(levels) if level[0]), levels[0])
    line = line or "{setting} is refused: " + error["msg"]
    return line.format(setting=setting, value=value, **facts)


def line_of(annotation: Any) -> str:
    base, metadata = split(annotation)
    lines = [item.line for item in metadata if isinstance(item, Refusal)]
    lines += [
        "{setting} must be " + item.description
        for item in metadata
        if isinstance(item, FieldInfo) and item.description
    ]
    if get_origin(base) is Literal:
        *choices, last = [str(choice) for choice in get_args(base) if choice is not None]
        lines.append("{setting} is unknown; choose " + ", ".join(choices) + " or " + last)
    members = [member for member in get_args(base) if member is not type(None)]
    if get_origin(base) in (Union, UnionType) and len(members) == 1:  # a value, or null
        lines.append(line_of(members[0]))
    return lines[0] if lines else ""


def split(annotation: Any) -> tuple[Any, tuple]:
    """A type and what Annotated adds to it."""
    if get_origin(annotation) is Annotated:
        base, *metadata = get_args(annotation)
        return base, tuple(metadata)
    return annotation, ()


def fields(kind: Any) -> dict[str, Any]:
    return get_type_hints(split(kind)[0], include_extras=True)


def plain(value: Any) -> Any:
    """A config value as Python: lists and dicts, interpolations resolved. OmegaConf only where
    the config is Hydra's: predict's plain runs give plain values (plain_run.py)."""
    if "omegaconf" not in sys.modules:
        return value
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(value, DictConfig | ListConfig):
        return OmegaConf.to_container(value, resolve=True)
    return value
