"""eval.py on a trained checkpoint, in process and through the CLI."""

import json

import pytest
import torch
from conftest import (
    QUIET,
    chance,
    compose_config,
    default_data,
    default_datamodule,
    kept_in_log,
    read_checkpoint,
    run_cli,
)

from {{ cookiecutter.package }}.console import UserError
from {{ cookiecutter.package }}.tasks.eval import evaluate


def test_eval_reproduces_the_test_metrics_of_the_run(trained_run, tmp_path, score):
    best = trained_run / "checkpoints" / "best.ckpt"
    evaluate(compose_config("eval", tmp_path, [f"ckpt_path={best}"]))
    trained = json.loads((trained_run / "metrics.json").read_text())
    evaluated = json.loads((tmp_path / "metrics.json").read_text())
    assert evaluated[f"test/{score}"] == trained[f"test/{score}"]
    assert abs(evaluated["test/loss"] - trained["test/loss"]) < 1e-6


def test_eval_elsewhere_takes_another_data_config_or_changes_to_the_recorded_one(
    trained_run, tmp_path, score
):
    best = trained_run / "checkpoints" / "best.ckpt"
    another = [f"data={default_data()}", "data.split_seed=7"]
    forms = {"another": another, "changed": ["+data.split_seed=7"]}
    metrics = {
        form: evaluate(compose_config("eval", tmp_path / form, [f"ckpt_path={best}", *overrides]))
        for form, overrides in forms.items()
    }
    reshuffled = default_datamodule(tmp_path / "data", ["data.split_seed=7"])
    name = f"test/{score}"
    assert metrics["another"][name] == metrics["changed"][name] > chance(reshuffled)


def test_eval_checks_the_data_options_it_is_given(trained_run, tmp_path):
    best = trained_run / "checkpoints" / "best.ckpt"
    with pytest.raises(UserError, match="^data.batch_size=0 must be a whole number of at least 1"):
        evaluate(compose_config("eval", tmp_path, [f"ckpt_path={best}", "+data.batch_size=0"]))


def test_eval_on_data_of_another_kind_is_one_line(trained_run, tmp_path):
    best = trained_run / "checkpoints" / "best.ckpt"
    kind = read_checkpoint(best)["config"]["contract"]["input"]["kind"]
    rows = tmp_path / "rows.csv"
    rows.write_text("words,size,label\n" + "star moon,1.5,sky\nbread soup,2.5,kitchen\n" * 20)
    other = "text" if kind == "table" else "table"
    data = [f"data={other}", f"data.path={rows}", "data.target=label"]
    data += ["data.text=words"] if other == "text" else []
    with pytest.raises(UserError) as refused:
        evaluate(compose_config("eval", tmp_path, [f"ckpt_path={best}", *data]))
    assert str(refused.value) == (
        f"the model was trained on {kind} inputs and this data config reads {other} inputs: pass "
        "a data config of its kind, or none for the data it was trained on"
    )


@pytest.mark.slow  # an eval.py process
def test_eval_cli_writes_metrics_to_its_run_dir(trained_run, tmp_path, score):
    best = trained_run / "checkpoints" / "best.ckpt"
    result = run_cli("eval.py", f"ckpt_path={best}", f"hydra.run.dir={tmp_path}", *QUIET[:3])
    assert result.returncode == 0, result.stderr
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    trained = json.loads((trained_run / "metrics.json").read_text())
    assert metrics[f"test/{score}"] == trained[f"test/{score}"]
    # Lightning prints its table of them on the console only; eval.log keeps them too.
    rows = [line.split() for line in kept_in_log(tmp_path / "eval.log")[2:]]
    assert rows == [[name, str(value)] for name, value in sorted(metrics.items())]


# The checkpoint's weights are NaN on purpose: torchmetrics warns that it drops NaN losses.
@pytest.mark.filterwarnings("ignore:Encountered `nan` values in tensor")
def test_eval_of_a_diverged_checkpoint_writes_strict_json(trained_run, tmp_path):
    checkpoint = read_checkpoint(trained_run / "checkpoints" / "best.ckpt")
    for value in checkpoint["state_dict"].values():
        if value.is_floating_point():
            value.fill_(float("nan"))
    torch.save(checkpoint, tmp_path / "diverged.ckpt")
    evaluate(compose_config("eval", tmp_path / "run", [f"ckpt_path={tmp_path / 'diverged.ckpt'}"]))
    text = (tmp_path / "run" / "metrics.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text)["test/loss"] is None  # not a number, written as null
