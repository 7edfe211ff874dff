"""The data contract and the export manifest: typed, versioned models with to/from JSON.

A datamodule fits its contract on the training split: what one sample is (`Input`), how raw
samples become model inputs (`preprocessing`, the input kind's own model: kinds/) and what is
predicted (`target`, the task's own model: targets/). Checkpoints record it, so eval and export
prepare other data exactly as the model was trained on; export writes it into manifest.json with
the files it exported, and predict and serve read it back. This module knows no kind and no
task, and imports no torch.
"""

import hashlib
import importlib
import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, SerializeAsAny, ValidationError, model_validator

from .console import UserError

# The manifest's parts that change a prediction, which each artifact's digest covers.
PREDICTIVE = {"task", "input", "preprocessing", "output", "target"}
# Raised when a field changes meaning; a file of a newer version is refused, not misread.
CONTRACT_VERSION = 1
MANIFEST_VERSION = 1


class Model(BaseModel):
    """Immutable, and strict about its fields: a misspelt or unknown one is an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class Preprocessing(Model):
    """An input kind's preprocessing (kinds/<kind>.py defines its fields)."""


class Target(Model):
    """A task's target: what the model predicts (targets/<task>.py defines its fields)."""

    task: str


class Input(Model):
    """One sample as the model takes it: its kind (a module of kinds/), shape and dtype."""

    kind: str
    shape: list[int]
    dtype: str = "float32"


def typed_parts(data: Any) -> Any:
    """Validates `preprocessing` and `target` with the models of the contract's input kind and
    task, found by name in their registries."""
    if not isinstance(data, dict):
        return data
    data = dict(data)
    for part, key, package, name in (
        ("preprocessing", "Preprocessing", "kinds", field(data, "input", "kind")),
        ("target", "Target", "targets", field(data, "target", "task")),
    ):
        if isinstance(name, str) and isinstance(data.get(part), dict):
            # By name: the plug-ins build their models on this module's.
            registry = importlib.import_module(f"{__package__}.{package}")
            try:
                data[part] = getattr(registry.get(name), key).model_validate(data[part])
            except ValidationError as error:  # pydantic would drop the part from its place
                raise PartInvalid(part, error) from None
    return data


class PartInvalid(Exception):
    """A part of a contract or manifest that its plug-in's model refuses."""

    def __init__(self, part: str, error: ValidationError):
        super().__init__(part)
        self.part, self.error = part, error


def field(data: dict, part: str, name: str) -> Any:
    value = data.get(part)
    return value.get(name) if isinstance(value, dict) else None


def check_version(data: Any, newest: int, what: str) -> Any:
    version = data.get("version") if isinstance(data, dict) else None
    if isinstance(version, int) and version > newest:
        raise ValueError(f"{what} version {version} is newer than this project reads ({newest})")
    return data


class Contract(Model):
    """What a datamodule declares once it is set up, fitted on its training split only."""

    version: int = CONTRACT_VERSION
    input: Input
    preprocessing: SerializeAsAny[Preprocessing]
    target: SerializeAsAny[Target]

    @model_validator(mode="before")
    @classmethod
    def parts(cls, data: Any) -> Any:
        return typed_parts(check_version(data, CONTRACT_VERSION, "contract"))

    @classmethod
    def from_dict(cls, data: Any, source: str, advice: str = "") -> "Contract":
        """The contract in `data` (a checkpoint's record), or one line naming what is wrong."""
        return validated(cls, data, source, advice)


class Artifact(Model):
    """One exported file: its checksum and size, how it measured against the model, and the
    digest of everything that changes its predictions (`Manifest.digest_of`). An ONNX file also
    says which variant it is, the operator domains it uses with their versions
    (`{"ai.onnx": 18}`: ONNX's own operators only; `"com.microsoft"`: onnxruntime's own too)
    and the runtimes that run it: onnxruntime, and where it holds ONNX's own operators only,
    those the project's tests run it in: OpenVINO, and onnx's reference evaluator where export
    ran it there."""

    file: str
    sha256: str
    digest: str
    bytes: int
    test_metric: dict[str, float]
    max_abs_diff: float
    latency_ms: dict[str, float]
    variant: str | None = None
    opset_domains: dict[str, int] | None = None
    runtimes: list[str] | None = None


class ManifestInput(Input):
    """The exported graph's input: its name, and the batch dimension first (`"batch"`)."""

    name: str
    shape: list[int | str]  # type: ignore[assignment]


class Manifest(Model):
    """manifest.json: what a runtime needs to feed an export and read its outputs, with the
    data contract of training, flattened (`input`, `preprocessing`, `task`, `target`)."""

    version: int = MANIFEST_VERSION
    formats: dict[str, Artifact]
    task: str
    input: ManifestInput
    preprocessing: SerializeAsAny[Preprocessing]
    output: dict[str, str]
    target: SerializeAsAny[Target]
    opset: int | None
    checkpoint: dict[str, str]
    versions: dict[str, str]
    # Files the input kind writes beside the models for other runtimes (a text model's
    # tokenizer.json), each with its SHA-256: covered by every artifact's digest.
    files: dict[str, str] = {}

    @model_validator(mode="before")
    @classmethod
    def parts(cls, data: Any) -> Any:
        return typed_parts(check_version(data, MANIFEST_VERSION, "manifest"))

    @model_validator(mode="after")
    def one_task(self) -> "Manifest":
        if self.task != self.target.task:
            raise ValueError(f"task {self.task!r} differs from target.task {self.target.task!r}")
        return self

    def digest_of(self, artifact: Artifact) -> str:
        """One SHA-256 over what changes the predictions of `artifact`: the input, its
        preprocessing, the outputs, the task and its target as this manifest records them, and
        the checksums of the file the artifact reads and of the kind's `files`. A reordered
        class name, a changed mean or a file of another export all change it."""
        parts = self.model_dump(mode="json", include=PREDICTIVE)
        covered = {"manifest": parts, "files": {artifact.file: artifact.sha256, **self.files}}
        return hashlib.sha256(json.dumps(covered, sort_keys=True).encode()).hexdigest()

    def sealed(self) -> "Manifest":
        """This manifest with the digest of each artifact recorded in it."""
        formats = {
            name: artifact.model_copy(update={"digest": self.digest_of(artifact)})
            for name, artifact in self.formats.items()
        }
        return self.model_copy(update={"formats": formats})

    @property
    def contract(self) -> Contract:
        # A dynamic axis (a text's tokens) is named in the manifest: its size in training is
        # the preprocessing's.
        kind = importlib.import_module(f"{__package__}.kinds").get(self.input.kind)
        shape = kind.input_shape(self.preprocessing)
        sample = Input(kind=self.input.kind, shape=shape, dtype=self.input.dtype)
        return Contract(input=sample, preprocessing=self.preprocessing, target=self.target)

    @classmethod
    def read(cls, path: Path) -> "Manifest":
        """manifest.json, checked against its schema, or one line that says to export again."""
        try:
            data = json.loads(path.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise UserError(f"{path} is not valid JSON ({error}); export again") from None
        return validated(cls, data, str(path), "; export again")


M = TypeVar("M", bound=Model)


# A TypeVar, not `def validated[M: Model]`: the project supports Pythons before 3.12.
def validated(model: type[M], data: Any, source: str, advice: str = "") -> M:  # noqa: UP047
    """`model` from `data`, or a UserError naming the first field that is missing or wrong."""
    try:
        return model.model_validate(data)
    except UserError as error:  # a registry's: an unknown kind or task
        raise UserError(f"{source}: {error}{advice}") from None
    except PartInvalid as invalid:
        raise refusal(invalid.error, source, advice, invalid.part) from None
    except ValidationError as invalid:
        raise refusal(invalid, source, advice) from None


def refusal(error: ValidationError, source: str, advice: str, *place: str) -> UserError:
    """One line naming the first field that is missing or wrong, where it sits."""
    first = error.errors()[0]
    where = ".".join([*place, *map(str, first["loc"])]) or "its contents"
    return UserError(f"{source}: {where}: {first['msg']}{advice}")


def manifest_schema(manifest: Manifest) -> dict[str, Any]:
    """The JSON Schema of `manifest`, with the preprocessing of its input kind and the target of
    its task in full: export writes it beside manifest.json."""
    schema = Manifest.model_json_schema()
    definitions = schema.setdefault("$defs", {})
    for field in ("preprocessing", "target"):
        part = type(getattr(manifest, field))
        own = part.model_json_schema(ref_template="#/$defs/{model}")
        definitions.update(own.pop("$defs", {}))
        definitions[part.__name__] = own
        schema["properties"][field] = {"$ref": f"#/$defs/{part.__name__}"}
    return schema
