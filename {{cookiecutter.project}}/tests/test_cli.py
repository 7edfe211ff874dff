"""The command line as users meet it: mistakes give one clear line (DDP: test_distributed.py)."""

import os
import subprocess
import sys

import pytest
from conftest import ROOT, compose_config, run_cli

from {{ cookiecutter.package }}.console import UserError
from {{ cookiecutter.package }}.tasks.eval import evaluate
from {{ cookiecutter.package }}.tasks.train import train


def first_line(result) -> str:
    return result.stderr.strip().splitlines()[0]


@pytest.mark.parametrize("flags", [["--help"], ["--cfg", "job"]], ids=["help", "cfg"])
def test_config_only_commands_do_not_import_torch(flags):
    code = (
        "import sys\n"
        f"sys.argv = ['train.py', *{flags}]\n"
        "from {{ cookiecutter.package }}.cli import train\n"
        "train()\n"
        "assert 'torch' not in sys.modules and 'pytorch_lightning' not in sys.modules\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "optimized_metric" in result.stdout or "Powered by Hydra" in result.stdout


@pytest.mark.parametrize(
    ("script", "overrides", "expected"),
    [
        ("eval.py", [], "error: eval needs a checkpoint: pass ckpt_path="),
        ("train.py", ["trainer=tpu_pod"], "Could not find 'trainer/tpu_pod'"),
        ("train.py", ["trainer.max_epoch=3"], "Could not override 'trainer.max_epoch'"),
    ],
)
def test_mistakes_give_one_clear_line(script, overrides, expected, tmp_path):
    result = run_cli(script, *overrides, f"hydra.run.dir={tmp_path / 'run'}", timeout=120)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert expected in first_line(result)


def test_missing_or_unreadable_checkpoints_are_named_in_one_line(tmp_path):
    """In process: the CLI prints any UserError as one line, as the test above shows."""
    broken = tmp_path / "broken.ckpt"
    broken.write_bytes(b"not a checkpoint")
    missing = "ckpt_path 'missing.ckpt' is not a file; pass ckpt_path="
    unreadable = f"{broken} is not a readable checkpoint (truncated or corrupt?)"
    cases = [
        (train, "train", "missing.ckpt", missing),
        (evaluate, "eval", "missing.ckpt", missing),
        (evaluate, "eval", broken, unreadable),
    ]
    for task, name, ckpt, message in cases:
        with pytest.raises(UserError) as error:
            task(compose_config(name, tmp_path / name, [f"ckpt_path={ckpt}"]))
        assert str(error.value).startswith(message)
        assert "\n" not in str(error.value)
    assert not (tmp_path / "train").exists() and not (tmp_path / "eval").exists()
