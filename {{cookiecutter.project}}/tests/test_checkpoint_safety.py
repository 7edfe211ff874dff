"""Checkpoints that carry code are refused before it can run; broken ones give a clear line."""

import copy
import json
import logging
import re
from pathlib import Path

import pytest
import torch
from conftest import (
    ALLOWED,
    compose_config,
    error_lines,
    read_checkpoint,
    run_cli,
    run_entry_point,
)
from omegaconf import OmegaConf

from {{ cookiecutter.package }}.builders import build_datamodule
from {{ cookiecutter.package }}.checkpoints import is_allowed
from {{ cookiecutter.package }}.console import UserError
from {{ cookiecutter.package }}.tasks.eval import evaluate
from {{ cookiecutter.package }}.tasks.export import export
from {{ cookiecutter.package }}.tasks.train import train


class Payload:
    """Unpickling this object creates `marker`: stands in for any code an attacker would run."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def malicious_checkpoint(path, marker):
    torch.save({"state_dict": {}, "hyper_parameters": {}, "callbacks": Payload(marker)}, path)
    return path


def test_the_payload_runs_when_loaded_unsafely(tmp_path):
    """Proves the checkpoint below is a real threat: a plain unpickling runs it."""
    marker = tmp_path / "pwned"
    torch.load(malicious_checkpoint(tmp_path / "evil.ckpt", marker), weights_only=False)
    assert marker.exists()


@pytest.mark.slow  # three processes that each import torch and Lightning
@pytest.mark.parametrize("script", ["export.py", "eval.py", "train.py"])
def test_a_checkpoint_that_carries_code_is_refused_and_never_runs(script, tmp_path):
    marker = tmp_path / "pwned"
    evil = malicious_checkpoint(tmp_path / "evil.ckpt", marker)
    result = run_cli(script, f"ckpt_path={evil}", f"hydra.run.dir={tmp_path / 'run'}", timeout=120)
    assert result.returncode == 1
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith(f"error: refusing {evil}: it holds pickled objects")
    assert "Traceback" not in result.stderr
    assert not marker.exists()


def test_a_truncated_checkpoint_gives_a_clear_line_and_no_artifacts(trained_run, tmp_path):
    best = (trained_run / "checkpoints" / "best.ckpt").read_bytes()
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(best[: len(best) // 2])
    cfg = compose_config("export", tmp_path / "run", [f"ckpt_path={truncated}"], quiet=False)
    with pytest.raises(UserError, match=f"^{re.escape(str(truncated))} is not a readable"):
        export(cfg)
    assert not (tmp_path / "run").exists()


def flip_a_weight(best: Path, copy: Path) -> Path:
    """A copy of `best` with one bit flipped in the middle of its largest tensor's bytes, as a
    failing disk or a bad transfer would: the zip archive around them stays intact."""
    weights = read_checkpoint(best)["state_dict"]
    largest = max(weights.values(), key=lambda weight: weight.nbytes).numpy().tobytes()
    data = bytearray(best.read_bytes())
    assert data.count(largest) == 1
    data[data.index(largest) + len(largest) // 2] ^= 0x10
    copy.write_bytes(bytes(data))
    return copy


def test_a_flipped_bit_loads_silently_with_torch_alone(trained_run, tmp_path):
    """Proves the case below is real: torch.load does not check the archive's CRCs."""
    best = trained_run / "checkpoints" / "best.ckpt"
    flipped = read_checkpoint(flip_a_weight(best, tmp_path / "flipped.ckpt"))
    real = read_checkpoint(best)
    assert any(
        not torch.equal(flipped["state_dict"][name], weight)
        for name, weight in real["state_dict"].items()
    )


def corrupt_line(checkpoint: Path) -> str:
    """The pattern of the line that refuses a checkpoint whose weights no longer match their
    CRCs."""
    return (
        f"{re.escape(str(checkpoint))} is corrupt: \\S+/data/\\d+ no longer matches the "
        "checksum it was saved with; use another checkpoint of the run \\(e.g. last.ckpt\\) or "
        "train again"
    )


def test_eval_refuses_a_checkpoint_with_a_flipped_bit_in_one_line_before_importing_torch(
    trained_run, tmp_path
):
    flipped = flip_a_weight(trained_run / "checkpoints" / "best.ckpt", tmp_path / "flipped.ckpt")
    run = tmp_path / "run"
    result = run_entry_point("evaluate", f"ckpt_path={flipped}", f"hydra.run.dir={run}")
    assert result.returncode == 1
    assert error_lines(result) == [result.stderr.strip().splitlines()[-1]]
    assert re.fullmatch(f"error: {corrupt_line(flipped)}", error_lines(result)[0])
    assert "Traceback" not in result.stderr
    assert result.stdout.splitlines()[-1] == "[]"  # the CRC check needs no torch
    assert not (run / "metrics.json").exists()


@pytest.mark.parametrize(
    ("task", "name", "quiet"),
    [(export, "export", False), (train, "train", True)],
    ids=["export", "train"],
)
def test_export_and_resume_refuse_a_checkpoint_with_a_flipped_bit(
    task, name, quiet, trained_run, tmp_path
):
    flipped = flip_a_weight(trained_run / "checkpoints" / "best.ckpt", tmp_path / "flipped.ckpt")
    run = tmp_path / "run"
    with pytest.raises(UserError) as error:
        task(compose_config(name, run, [f"ckpt_path={flipped}"], quiet=quiet))
    assert re.fullmatch(corrupt_line(flipped), str(error.value))
    assert not (run / "checkpoints").exists() and not (run / "manifest.json").exists()


# A file of the user's that every hostile checkpoint below would overwrite if instantiated.
VICTIM = "results the user wants to keep\n"


def write_victim(victim) -> dict:
    return {"_target_": "builtins.open", "_args_": [str(victim), "w"]}


def hostile(real: dict, case: str, victim) -> dict:
    """`real` with one config changed so that instantiating it would write to `victim`.
    Every one of these loads with `torch.load(weights_only=True)`: only strings and dicts."""
    checkpoint = copy.deepcopy(real)
    model = checkpoint["config"]["model"]
    write = write_victim(victim)
    if case == "file-write":
        model["net"] = write
    elif case == "nested-in-an-allowed-target":
        model["net"]["dropout"] = write
    elif case == "in-args":
        model["net"]["_args_"] = [write]
    elif case == "optimizer":
        model["optimizer"] = {"_target_": "os.system", "_partial_": True, "_args_": ["true"]}
        checkpoint["hyper_parameters"]["optimizer"] = model["optimizer"]
    elif case == "scheduler":
        model["scheduler"] = {
            "_target_": "builtins.exec",
            "_args_": [f"open({str(victim)!r}, 'w')"],
        }
    elif case == "through-an-allowed-modules-imports":
        # hydra's instantiate, as imported by the models' base module: it would build `write`.
        model["net"] = {
            "_target_": "{{ cookiecutter.package }}.models.base.instantiate",
            "config": write,
        }
    elif case == "data":
        checkpoint["config"]["data"] = write
    return checkpoint


CASES = [
    "file-write",
    "nested-in-an-allowed-target",
    "in-args",
    "optimizer",
    "scheduler",
    "through-an-allowed-modules-imports",
    "data",
]


@pytest.mark.parametrize("case", CASES)
def test_a_checkpoint_naming_code_is_refused_by_eval_export_and_resume(
    case, trained_run, tmp_path
):
    victim = tmp_path / "results.txt"
    victim.write_text(VICTIM)
    real = read_checkpoint(trained_run / "checkpoints" / "best.ckpt")
    checkpoint = tmp_path / f"{case}.ckpt"
    torch.save(hostile(real, case, victim), checkpoint)
    tasks = [(evaluate, "eval", True), (export, "export", False), (train, "train", True)]
    for task, name, quiet in tasks:
        cfg = compose_config(name, tmp_path / name, [f"ckpt_path={checkpoint}"], quiet=quiet)
        with pytest.raises(UserError) as error:
            task(cfg)
        message = str(error.value)
        assert message.startswith(f"refusing {checkpoint}: ") and "\n" not in message, name
        assert "allowed_targets in configs/allowed_targets.yaml" in message
        assert victim.read_text() == VICTIM, name
        assert not (tmp_path / name).exists()


@pytest.mark.slow  # an eval.py process; the test above refuses in process for each task
def test_the_cli_names_the_refused_target_in_one_line(trained_run, tmp_path):
    victim = tmp_path / "results.txt"
    victim.write_text(VICTIM)
    real = read_checkpoint(trained_run / "checkpoints" / "best.ckpt")
    torch.save(hostile(real, "file-write", victim), tmp_path / "hostile.ckpt")
    result = run_cli(
        "eval.py", f"ckpt_path={tmp_path / 'hostile.ckpt'}", f"hydra.run.dir={tmp_path / 'run'}"
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: refusing {tmp_path / 'hostile.ckpt'}: config.model.net._target_ is "
        "'builtins.open', not a class of an allowed module; if you trust this checkpoint, add its "
        f"module to allowed_targets in configs/allowed_targets.yaml (now: {', '.join(ALLOWED)})"
    )
    assert "Traceback" not in result.stderr
    assert victim.read_text() == VICTIM


def test_a_target_that_does_not_import_is_refused_without_hydras_error_log(caplog):
    package = "{{ cookiecutter.package }}"
    before = logging.getLogger("hydra.utils").level
    with caplog.at_level("DEBUG"):
        assert not is_allowed(f"{package}.models.os.system", [f"{package}.models"])
    assert caplog.records == []
    assert logging.getLogger("hydra.utils").level == before


def test_targets_are_allowed_only_where_they_are_defined():
    package = "{{ cookiecutter.package }}"
    allowed = [f"{package}.models", "torch.optim"]
    assert is_allowed(f"{package}.models.SmallCNN", allowed)  # defined in models/nets.py
    assert is_allowed("torch.optim.AdamW", allowed)
    assert is_allowed("torch.optim.lr_scheduler.CosineAnnealingLR", allowed)
    for target in [
        "builtins.open",
        f"{package}.models.base.instantiate",  # reachable, but defined in hydra
        f"{package}.models.classifier.torch.load",
        f"{package}.models.__builtins__",
        f"{package}.models",  # a module, not a class
        f"{package}.models_evil.Thing",
        f"{package}.files.save_text",  # the project's own, but not an allowed module
        "torch.optimizer.Thing",
        "os.system",
        {"_target_": "builtins.open"},
        None,
    ]:
        assert not is_allowed(target, allowed), target


def test_the_user_can_allow_a_module_of_their_own_in_config(trained_run, tmp_path, score):
    real = read_checkpoint(trained_run / "checkpoints" / "best.ckpt")
    net = real["config"]["model"]["net"]
    # The same network, as a class of a module of the user's.
    net["_target_"] = own = f"probes.{net['_target_'].rsplit('.', 1)[1]}"
    torch.save(real, tmp_path / "own.ckpt")
    overrides = [f"ckpt_path={tmp_path / 'own.ckpt'}"]
    with pytest.raises(UserError, match=f"'{own}', not a class of an allowed module"):
        evaluate(compose_config("eval", tmp_path / "refused", overrides))
    allow = f"allowed_targets=[{','.join([*ALLOWED, 'probes'])}]"
    metrics = evaluate(compose_config("eval", tmp_path / "allowed", [*overrides, allow]))
    # The trained weights, evaluated as the run itself evaluated them.
    trained = json.loads((trained_run / "metrics.json").read_text())
    assert metrics[f"test/{score}"] == trained[f"test/{score}"]


@pytest.mark.parametrize(
    ("contents", "message"),
    [
        (b"a text file, not a checkpoint\n", "is not a checkpoint (torch.save writes zip"),
        ({"state_dict": {}, "hyper_parameters": {}}, "does not say which model it holds"),
        ({"hyper_parameters": {}}, "is not a Lightning checkpoint: it has no state_dict"),
    ],
    ids=["text", "no-config", "no-state-dict"],
)
def test_files_that_are_not_checkpoints_of_this_project_give_one_line(contents, message, tmp_path):
    path = tmp_path / "not-a-checkpoint.ckpt"
    if isinstance(contents, bytes):
        path.write_bytes(contents)
    else:
        torch.save(contents, path)
    for task, name, quiet in [(evaluate, "eval", True), (export, "export", False)]:
        with pytest.raises(UserError, match=re.escape(message)) as error:
            task(compose_config(name, tmp_path / name, [f"ckpt_path={path}"], quiet=quiet))
        assert "\n" not in str(error.value)


def test_an_export_passed_as_a_checkpoint_says_to_pass_the_checkpoint_instead(
    exported_run, tmp_path
):
    for path, what in [
        (exported_run, "an export"),
        (exported_run / "model.pt2", "a torch.export program"),
        (exported_run / "model.ts", "a TorchScript module"),
    ]:
        cfg = compose_config("eval", tmp_path / "eval", [f"ckpt_path={path}"])
        with pytest.raises(UserError, match=f"is {what}, which export.py writes, not a"):
            evaluate(cfg)


def config_a_string(checkpoint: dict) -> None:
    checkpoint["config"] = "model: cnn"


def weights_a_list(checkpoint: dict) -> None:
    checkpoint["state_dict"] = list(checkpoint["state_dict"].values())


def contract_without_target(checkpoint: dict) -> None:
    del checkpoint["config"]["contract"]["target"]


def preprocessing_a_string(checkpoint: dict) -> None:
    checkpoint["config"]["contract"]["preprocessing"] = "standardize"


WRONG_TYPES = {
    "config-a-string": (config_a_string, ": config is a str, not the mapping train.py writes"),
    "state_dict-a-list": (weights_a_list, " is not a Lightning checkpoint: its state_dict is a"),
    "contract-without-target": (contract_without_target, ": config.contract: target: Field"),
    "preprocessing-a-string": (
        preprocessing_a_string,
        ": config.contract: preprocessing: Input should be a valid dictionary",
    ),
}


@pytest.mark.slow  # a process per case that imports torch and Lightning
@pytest.mark.parametrize(("edit", "message"), WRONG_TYPES.values(), ids=WRONG_TYPES)
def test_checkpoint_fields_of_the_wrong_type_give_one_line(edit, message, trained_run, tmp_path):
    checkpoint = read_checkpoint(trained_run / "checkpoints" / "best.ckpt")
    edit(checkpoint)
    edited = tmp_path / "edited.ckpt"
    torch.save(checkpoint, edited)
    result = run_cli("eval.py", f"ckpt_path={edited}", f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    (line,) = error_lines(result)
    assert line.startswith(f"error: {edited}{message}")
    assert line.endswith("; pass a checkpoint that train.py wrote") or "state_dict" in message
    assert not (tmp_path / "run" / "metrics.json").exists()


def test_weights_of_another_architecture_give_one_line(trained_run, tmp_path):
    best = trained_run / "checkpoints" / "best.ckpt"
    # The transformer: another network than the one the model config declares for any kind.
    other = ["model/net=transformer"]
    resume = compose_config("train", tmp_path / "other", [f"ckpt_path={best}", *other])
    with pytest.raises(UserError, match="holds another architecture than the configured model"):
        train(resume)
    # Recorded as the transformer, but holding the trained network's weights (a hand-edited
    # checkpoint, say).
    real = read_checkpoint(best)
    cfg = compose_config("train", tmp_path, other)
    build_datamodule(cfg)  # fills in the data's shapes, which the network is built for
    real["config"]["model"]["net"] = OmegaConf.to_container(cfg.model.net, resolve=True)
    torch.save(real, tmp_path / "mismatch.ckpt")
    with pytest.raises(UserError, match="holds another architecture"):
        evaluate(
            compose_config("eval", tmp_path / "eval", [f"ckpt_path={tmp_path / 'mismatch.ckpt'}"])
        )
