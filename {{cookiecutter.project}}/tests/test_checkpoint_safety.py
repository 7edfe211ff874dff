"""Checkpoints that carry code are refused before it can run; broken ones give a clear line."""

import re

import pytest
import torch
from conftest import compose_config, run_cli

from {{ cookiecutter.package }}.console import UserError
from {{ cookiecutter.package }}.tasks.export import export


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
