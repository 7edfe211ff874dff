"""Checkpoints: safe loading and rebuilding (nothing in a checkpoint can run code), and finding
the one to resume from. Writing them is saving.py's.

No Lightning here, and torch only once a file has passed the checks that need none: the commands
refuse a bad checkpoint before they import Lightning (input_checks.py).
"""

import importlib
import logging
import mmap
import pickle
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from hydra.utils import get_object
from isal.isal_zlib import crc32
from omegaconf import DictConfig, OmegaConf

from .console import UserError
from .contract import Contract
from .options import DATA, validated
from .run_dir import checkpoint_in
from .upstream import refused_a_global

# Where a refused target can be allowed; never by a checkpoint.
ALLOWLIST_FILE = "configs/allowed_targets.yaml"
DOTTED_NAME = re.compile(r"[A-Za-z]\w*(\.[A-Za-z]\w*)+")
# The files of an export that are zip archives too, which torch.load would fail to read.
EXPORTED = {".pt2": "a torch.export program", ".ts": "a TorchScript module"}
ZIP_MAGIC = b"PK\x03\x04"  # the first bytes of a zip archive, which torch.save writes
CRC_CHUNK = 64 << 20  # bytes summed per call: large, and bounded for members of any size


def load_checkpoint(path: str | Path) -> dict:
    """Reads a checkpoint with `weights_only=True`, turning every failure into one clear line."""
    path = Path(path)
    if checkpoint := checkpoint_in(path):
        raise UserError(
            f"ckpt_path {str(path)!r} is a folder; pass the checkpoint in it, e.g. "
            f"ckpt_path={checkpoint}"
        )
    if path.suffix in EXPORTED or (path / "manifest.json").is_file():
        what = EXPORTED.get(path.suffix, "an export")
        raise UserError(
            f"{path} is {what}, which export.py writes, not a checkpoint: pass the checkpoint "
            "it was exported from (ckpt_path=<a .ckpt file of a training run>)"
        )
    if not path.is_file():
        raise UserError(
            f"ckpt_path {str(path)!r} is not a file; pass ckpt_path=<checkpoint>, "
            "e.g. logs/train/runs/<time>/checkpoints/best.ckpt"
        )
    try:
        with open(path, "rb") as file:
            if file.read(4) != ZIP_MAGIC:
                raise UserError(
                    f"{path} is not a checkpoint (torch.save writes zip archives, this is none): "
                    "pass ckpt_path=<a .ckpt file of a training run>"
                )
        damaged = damaged_member(path)
        if damaged:
            raise UserError(
                f"{path} is corrupt: {damaged} no longer matches the checksum it was saved with; "
                "use another checkpoint of the run (e.g. last.ckpt) or train again"
            )
        import torch  # only now: the checks above need no torch, and refuse in a second

        # mmap: checking a large checkpoint before training resumes reads only what it needs.
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as error:
        # weights_only refuses any global outside tensors and plain containers, before calling it.
        if not refused_a_global(error):
            raise UserError(
                f"{path} is not a readable checkpoint (truncated or corrupt?)"
            ) from None
        raise UserError(
            f"refusing {path}: it holds pickled objects that could run code when loaded; "
            "only checkpoints of tensors and plain values are accepted"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile) as error:
        reason = str(error).splitlines()[0].split(". ")[0]
        raise UserError(
            f"{path} is not a readable checkpoint (truncated or corrupt?): {reason}"
        ) from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise UserError(f"{path} is not a Lightning checkpoint: it has no state_dict")
    check_types(checkpoint, path)
    return checkpoint


def check_types(checkpoint: dict, path: Path) -> None:
    """One line when a part that eval, export and resuming read is not of the type train.py
    writes: the weights a mapping of names to tensors, the recorded configs mappings."""
    import torch  # imported by load_checkpoint already

    weights = checkpoint["state_dict"]
    if not isinstance(weights, dict) or not all(
        isinstance(name, str) and isinstance(value, torch.Tensor)
        for name, value in weights.items()
    ):
        raise UserError(
            f"{path} is not a Lightning checkpoint: its state_dict is a {type(weights).__name__} "
            "that does not map names to tensors"
        )
    config = checkpoint.get("config", {})
    parts = config.items() if isinstance(config, dict) else [("", config)]
    for part, value in parts:
        if not isinstance(value, dict) and not (part == "contract" and value is None):
            where = f"config.{part}".rstrip(".")
            raise UserError(
                f"{path}: {where} is a {type(value).__name__}, not the mapping train.py writes; "
                "pass a checkpoint that train.py wrote"
            )


def damaged_member(path: Path) -> str | None:
    """The first member of a checkpoint's zip archive whose bytes no longer match the CRC-32
    written beside them, if any: torch.load never checks them, and a flipped bit in a tensor
    would load as a wrong weight. Summed straight from a memory map, without copies, by ISA-L:
    zlib's CRC-32 took longer than the load itself (benchmarks/README.md)."""
    # One open file for the archive's directory and its bytes: a run replaces last.ckpt while
    # others read it, and two opens could meet two different files.
    with (
        open(path, "rb") as file,
        zipfile.ZipFile(file) as archive,
        mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data,
    ):
        for member in archive.infolist():
            if member.compress_type != zipfile.ZIP_STORED:  # not torch's; zipfile checks these
                with archive.open(member) as stream:
                    while stream.read(CRC_CHUNK):
                        pass
                continue
            start = stored_data_start(data, member.header_offset)
            end, crc = start + member.file_size, 0
            with memoryview(data) as view:
                for offset in range(start, end, CRC_CHUNK):
                    crc = crc32(view[offset : min(offset + CRC_CHUNK, end)], crc)
            if crc != member.CRC:
                return member.filename
    return None


def stored_data_start(data: mmap.mmap, header: int) -> int:
    """Where a member's bytes begin: after its local header (30 bytes), name and extra field."""
    name_length = int.from_bytes(data[header + 26 : header + 28], "little")
    extra_length = int.from_bytes(data[header + 28 : header + 30], "little")
    return header + 30 + name_length + extra_length


def leaves(tree, where: str = "") -> Iterator[tuple[str, object]]:
    """Every value in a nest of dicts and lists that is not itself one, with where it sits; a
    `_target_` counts as a value whatever it holds."""
    items = tree.items() if isinstance(tree, dict) else enumerate(tree)
    for key, value in items:
        place = f"{where}[{key}]" if isinstance(tree, list | tuple) else f"{where}.{key}"
        if isinstance(value, dict | list | tuple) and key != "_target_":
            yield from leaves(value, place)
        else:
            yield place.lstrip("."), value


def is_allowed(target: object, allowed: list[str]) -> bool:
    """Whether `target` names a class or function defined inside one of the `allowed` modules.

    The name is checked before anything is imported, then the object it resolves to: a name can
    reach anything through a module's own imports (`<allowed>.some_module.os.system`), so the
    object must be defined in an allowed module, not merely be reachable from one.
    """
    if not isinstance(target, str) or not DOTTED_NAME.fullmatch(target):
        return False
    prefixes = [name for name in allowed if target.startswith(f"{name}.")]
    if not prefixes:
        return False
    # Hydra logs each failed import as an ERROR before raising: the refusal says it all.
    hydra_log = logging.getLogger("hydra.utils")
    level = hydra_log.level
    hydra_log.setLevel(logging.CRITICAL)
    try:
        obj = get_object(target)
    except (ImportError, AttributeError, ValueError):
        return False
    finally:
        hydra_log.setLevel(level)
    module = getattr(obj, "__module__", None) or ""
    defined_inside = any(module == name or module.startswith(f"{name}.") for name in prefixes)
    return callable(obj) and not isinstance(obj, ModuleType) and defined_inside


def missing_code(target: object, allowed: list[str]) -> str | None:
    """Why a name inside an allowed module cannot be imported (a module of the user's own that
    was moved or deleted since training), or None: then it is not allowed, or importable."""
    if not isinstance(target, str) or not DOTTED_NAME.fullmatch(target):
        return None
    if not any(target.startswith(f"{name}.") for name in allowed):
        return None
    try:
        imported(target)
    except (ImportError, AttributeError) as error:
        return str(error)
    return None


def imported(target: str) -> object:
    """What a dotted `_target_` names, from its module; ImportError, AttributeError or (for a
    name without a module) ValueError where it cannot be had."""
    module, _, name = target.rpartition(".")
    return getattr(importlib.import_module(module), name)


def check_targets(checkpoint: dict, allowed: list[str], path: str | Path) -> None:
    """Refuses a checkpoint that names any `_target_` outside `allowed`, before anything is
    instantiated: `weights_only=True` keeps pickled code out, but `instantiate` calls whatever a
    plain string names. Interpolations are refused too: resolving them would run resolvers."""
    for place, value in leaves(checkpoint):
        if place.endswith("._target_") or place == "_target_":
            if not is_allowed(value, allowed):
                missing = missing_code(value, allowed)
                if missing:
                    raise UserError(
                        f"{path} was trained with {value!r} ({place}), which cannot be imported "
                        f"here ({missing}): restore the code it was trained with"
                    )
                raise UserError(
                    f"refusing {path}: {place} is {value!r}, not a class of an allowed module; "
                    f"if you trust this checkpoint, add its module to allowed_targets in "
                    f"{ALLOWLIST_FILE} (now: {', '.join(allowed)})"
                )
        elif isinstance(value, str) and "${" in value:
            raise UserError(f"refusing {path}: {place} holds a config interpolation {value!r}")


def recorded(checkpoint: dict, part: str, path: str | Path) -> dict:
    """The config of `part` ("model" or "data") that the checkpoint was trained with."""
    config = checkpoint.get("config", {}).get(part)
    if not isinstance(config, dict) or "_target_" not in config:
        raise UserError(
            f"{path} does not say which {part} it holds (no config.{part} in it): "
            "pass a checkpoint that train.py wrote"
        )
    return config


def trained_configs(
    path: str | Path, allowed: list[str], data: DictConfig | None = None
) -> tuple[dict, dict, dict]:
    """A checked checkpoint and the model and data configs to rebuild it with. `data` evaluates
    elsewhere: a whole data config (with `_target_`), or keys that change the recorded one."""
    checkpoint = load_checkpoint(path)
    check_targets(checkpoint, allowed, path)
    model = recorded(checkpoint, "model", path)
    changes = OmegaConf.to_container(data, resolve=True) if data else {}
    check_targets(changes, allowed, "the data config")
    if "_target_" not in changes:
        changes = recorded(checkpoint, "data", path) | changes
    validated(DATA, changes, prefix="data.")  # with the changes eval or export was given
    # Prepared as the model was trained: its statistics, vocabularies and classes. Checked here,
    # where the line can name the checkpoint, not inside the datamodule.
    contract = checkpoint["config"].get("contract")
    if not isinstance(contract, dict):
        raise UserError(f"{path} records no data contract: pass a checkpoint that train.py wrote")
    advice = "; pass a checkpoint that train.py wrote"
    Contract.from_dict(contract, f"{path}: config.contract", advice)
    return checkpoint, model, changes


def check_resumable(checkpoint: dict, contract: Contract, path: str) -> None:
    """One line when the data to resume on are not those the checkpoint's model learned: another
    input kind or shape, or another target. The target's fitted statistics (numbers) may differ:
    the same data fit the same ones, up to rounding on another machine."""
    then = Contract.from_dict(checkpoint["config"].get("contract"), f"{path}: config.contract")
    was, now = identity(then), identity(contract)
    differing = next((key for key in {**was, **now} if was.get(key) != now.get(key)), None)
    if differing:
        raise UserError(
            f"{path} was trained on other data: {differing} {was.get(differing)} there, "
            f"{now.get(differing)} here; resume on the data it was trained on, or train anew "
            "without ckpt_path"
        )


def identity(contract: Contract) -> dict:
    target = contract.target.to_dict()
    return {
        "input kind": contract.input.kind,
        "input shape": contract.input.shape,
        **{f"target {key}": value for key, value in target.items() if type(value) is not float},
    }


def resume_path(cfg: DictConfig) -> str | None:
    """The checkpoint to resume from: `ckpt_path` if given; else, with `auto_resume`, the run
    directory's newest checkpoint, so rerunning the same command (e.g. after a SLURM requeue)
    continues where the run stopped. Checked before anything starts."""
    path = cfg.ckpt_path
    if not path and cfg.get("auto_resume"):
        run_dir = Path(cfg.paths.output_dir)
        # last.ckpt, or the hpc_ckpt_<n>.ckpt that Lightning saves when SLURM preempts the job.
        saved = [run_dir / "checkpoints" / "last.ckpt", *run_dir.glob("hpc_ckpt_*.ckpt")]
        saved = [file for file in saved if file.is_file()]
        path = str(max(saved, key=lambda file: file.stat().st_mtime)) if saved else None
    if path:  # fails early, with one line, on a bad or unsafe file
        check_targets(load_checkpoint(path), list(cfg.allowed_targets), path)
    return path
