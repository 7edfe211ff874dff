"""The command line as users meet it: mistakes give one clear line (DDP: test_distributed.py)."""

import re
import resource
import signal
import subprocess
import sys
import time

import pytest
import torch
from conftest import (
    CONFIGS,
    DIGITS,
    FAST_LATENCY,
    QUIET,
    ROOT,
    TASK_MODELS,
    compose_config,
    copy_project,
    default_task,
    error_lines,
    kept_in_log,
    run_cli,
    run_code,
    run_entry_point,
    start_cli,
)
from hydra.core.override_parser.overrides_parser import OverridesParser

from {{ cookiecutter.package }}.builders import build_trainer
from {{ cookiecutter.package }}.console import UserError, exit_with_error
from {{ cookiecutter.package }}.plain_run import NotPlain, overrides
from {{ cookiecutter.package }}.tasks.eval import evaluate
from {{ cookiecutter.package }}.tasks.train import train

# Lightning would find the accelerator these ask for on a machine that has one.
# A command that imports torch and Lightning in a process of its own: seconds before it starts.
SLOW = pytest.mark.slow
NO_GPU = pytest.mark.skipif(
    torch.cuda.is_available() or torch.backends.mps.is_available(), reason="a GPU is present"
)
GPUS = torch.cuda.device_count()


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
    result = run_code(code, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "optimized_metric" in result.stdout or "Powered by Hydra" in result.stdout


def test_a_task_module_is_imported_without_collections_then_frozen_out_of_them():
    # torch and Lightning make hundreds of thousands of objects that are not garbage, which the
    # collector would go through again and again while they are imported.
    code = (
        "import gc\n"
        "from {{ cookiecutter.package }}.cli import import_task\n"
        "def collections():\n"
        "    return sum(generation['collections'] for generation in gc.get_stats())\n"
        "before = collections()\n"
        "import_task('{{ cookiecutter.package }}.tasks.predict')\n"
        "assert collections() == before, (before, collections())\n"
        "assert gc.isenabled() and gc.get_freeze_count() > 10_000, gc.get_freeze_count()\n"
        "try:\n"
        "    import_task('{{ cookiecutter.package }}.tasks.no_such_task')\n"
        "except ModuleNotFoundError:\n"
        "    assert gc.isenabled()\n"
        "else:\n"
        "    raise AssertionError('a module that does not exist was imported')\n"
    )
    result = run_code(code)
    assert result.returncode == 0, result.stderr


# Values as users type them, and values that Hydra reads as something other than their text.
READ_PLAINLY = ["./x.png", "../x", "photo.JPG", "a@b+c-d_e", "-", "+a", "0x10", "42", "-1", "+3"]
ARGUMENTS = [*READ_PLAINLY, "/tmp/a b.png", "007", "1_000", "1.5", "1e3", ".5", "inf", "nan"]
ARGUMENTS += ["infinity"]
ARGUMENTS += ["true", "False", "null", "'quoted'", "[1,2]", "a,b", "${paths.log_dir}", "~x"]


@pytest.mark.parametrize("value", ARGUMENTS)
@pytest.mark.parametrize("key", ["input", "hydra.run.dir", "+input", "paths.log_dir"])
def test_predict_reads_plain_settings_as_hydra_does_or_leaves_them_to_hydra(key, value):
    argument = f"{key}={value}"
    try:
        plain = overrides([argument])
    except NotPlain:  # Hydra reads it
        assert key.startswith(("+", "paths.")) or value not in READ_PLAINLY
        return
    [override] = OverridesParser.create().parse_overrides([argument])
    assert override.get_key_element() in {"input", "hydra.run.dir"}
    assert plain == {override.get_key_element(): override.value()}
    assert type(plain[key]) is type(override.value())


@SLOW  # train.py processes
@pytest.mark.parametrize("flag", ["--help", "--info"])
def test_help_into_a_pipe_its_reader_closed_ends_without_a_traceback(flag):
    process = start_cli("train.py", flag)  # as `python train.py --help | head -1` leaves it
    process.stdout.close()  # before the command writes: it starts in a second or more
    errors = process.stderr.read()
    process.wait(timeout=120)
    assert "Traceback" not in errors and "Logging error" not in errors


@SLOW  # a train.py process
def test_a_setting_the_optimizer_refuses_leaves_the_run_folder_to_the_corrected_command(tmp_path):
    # Refused before the loggers write: the folder holds the run's records and log alone.
    run, model = tmp_path / "run", f"model={TASK_MODELS[default_task()]}"
    refused = run_cli("train.py", model, "model.optimizer.lr=-1", f"hydra.run.dir={run}")
    assert refused.returncode == 1
    assert first_line(refused).startswith("error: model.optimizer (lr=-1, ")
    assert sorted(path.name for path in run.iterdir()) == [".hydra", "train.log"]


@pytest.mark.parametrize(
    ("script", "overrides", "expected"),
    [
        ("train.py", ["trainer=tpu_pod"], "Could not find 'trainer/tpu_pod'"),
        ("train.py", ["trainer.max_epoch=3"], "Could not override 'trainer.max_epoch'"),
        # The task's own checks, before it imports torch: one of the settings that
        # test_bad_settings_are_named_in_one_line_before_training checks in process.
        ("eval.py", [], "error: eval needs a checkpoint: pass ckpt_path="),
        ("train.py", ["data.batch_size=0"], "error: data.batch_size=0 must be a whole number"),
        # A value OmegaConf resolves only when the task reads it.
        (
            "train.py",
            ["data.batch_size=${nope}"],
            "error: data.batch_size reads ${nope}, which no config sets: set nope in its config, "
            "or pass +nope=<value>",
        ),
        ("train.py", ["data.batch_size=???"], "error: data.batch_size is not set: pass "),
    ],
)
def test_mistakes_give_one_clear_line(script, overrides, expected, tmp_path):
    result = run_cli(script, *overrides, f"hydra.run.dir={tmp_path / 'run'}", timeout=120)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert expected in first_line(result)
    if expected.startswith("error: "):  # the task's own check, in a run that Hydra started
        task = script.removesuffix(".py")
        assert kept_in_log(tmp_path / "run" / f"{task}.log", "ERROR") == [first_line(result)]


@pytest.mark.parametrize(
    ("function", "overrides", "expected"),
    [
        ("evaluate", [], "eval needs a checkpoint: pass ckpt_path="),
        ("evaluate", ["ckpt_path=missing.ckpt"], "ckpt_path 'missing.ckpt' is not a file"),
        ("train", ["data.batch_size=0"], "data.batch_size=0 must be a whole number"),
        ("train", ["seed=abc"], "seed=abc must be a whole number"),
        ("export_model", ["ckpt_path=x.ckpt", "formats=[bogus]"], "unknown format 'bogus'"),
    ],
    ids=["no-checkpoint", "missing-checkpoint", "data-option", "seed", "export-option"],
)
def test_refused_input_ends_before_torch_is_imported(function, overrides, expected, tmp_path):
    """Importing torch and Lightning takes seconds: input that needs neither to be refused is
    refused first."""
    result = run_entry_point(function, *overrides, f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 1, result.stderr
    (line,) = error_lines(result)
    assert line.startswith(f"error: {expected}")
    assert result.stdout.splitlines()[-1] == "[]"


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        (
            "data.batchsize=3",
            "error: Could not override 'data.batchsize'; to append to your config use "
            "+data.batchsize=3; key 'batchsize' is not in struct",
        ),
        (
            "data=bogus",
            "error: In 'train': Could not find 'data/bogus'; available options in 'data': "
            + ", ".join(sorted(path.stem for path in (CONFIGS / "data").glob("*.yaml"))),
        ),
        (
            "data.batch_size=[1",
            "error: cannot read data.batch_size=[1: no viable alternative at input '[1'; see "
            "https://",
        ),
        ("max_epochs", "error: 'max_epochs' is not a setting: write key=value, e.g. seed=7"),
        (
            "logger=[csv,bogus]",
            "error: In 'train': Could not load 'logger/bogus'; available options in 'logger': "
            + ", ".join(sorted(path.stem for path in (CONFIGS / "logger").glob("*.yaml"))),
        ),
    ],
    ids=["typo", "unknown-choice", "syntax", "no-equals", "unknown-in-a-list"],
)
def test_hydra_s_own_errors_are_one_line_too(override, expected, tmp_path):
    result = run_cli("train.py", override, f"hydra.run.dir={tmp_path / 'run'}", timeout=120)
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(expected)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("name", ["epoch=2-step=40.ckpt", "best (copy!).ckpt", "run~3.ckpt"])
def test_a_path_that_hydra_s_grammar_cannot_read_is_shown_quoted_and_that_is_read(name, tmp_path):
    """Lightning names checkpoints epoch=2-step=40.ckpt: unquoted, Hydra reads = ( ) ! and # as
    its own syntax. The line says how to quote the value, and the quoted form reaches eval."""
    checkpoint = tmp_path / name
    run_dir = f"hydra.run.dir={tmp_path / 'run'}"
    (line,) = error_lines(run_entry_point("evaluate", f"ckpt_path={checkpoint}", run_dir))
    assert line.startswith(f"error: cannot read ckpt_path={checkpoint}: Hydra's override grammar")
    quoted = re.search(r"as in '(.+)'$", line)[1]
    assert quoted == f'ckpt_path="{checkpoint}"'
    (line,) = error_lines(run_entry_point("evaluate", quoted, run_dir))
    assert line.startswith(f"error: ckpt_path '{checkpoint}' is not a file")


@pytest.mark.parametrize("key", ["paths.root_dir", "paths.log_dir"])
def test_an_empty_root_or_log_folder_is_refused_before_anything_is_written(key, tmp_path):
    """Empty, the run would go to /logs/train/runs/<time> (or /train/...), the cache to /.cache."""
    result = run_cli("train.py", f"{key}=", cwd=tmp_path, timeout=120)
    assert result.returncode == 1
    assert error_lines(result) == [f"error: {key}= names no folder; pass one, or leave it out"]
    assert not any(tmp_path.iterdir())


def test_a_path_from_the_home_folder_says_to_write_it_as_home(tmp_path):
    """The shell expands ~ at the start of a word only, not after ckpt_path=."""
    run_dir = f"hydra.run.dir={tmp_path / 'run'}"
    (line,) = error_lines(run_entry_point("evaluate", "ckpt_path=~/runs/best.ckpt", run_dir))
    assert line == (
        "error: cannot read ckpt_path=~/runs/best.ckpt: write your home folder as $HOME, "
        "ckpt_path=$HOME/runs/best.ckpt"
    )


def test_a_config_file_edited_into_broken_yaml_is_named_in_one_line(tmp_path):
    project = copy_project(tmp_path / "project")
    config = project / "configs" / "train.yaml"
    config.write_text(config.read_text() + "tags: [dev, v2\n")  # the bracket left open
    result = run_cli("train.py", f"hydra.run.dir={tmp_path / 'run'}", root=project, timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    (line,) = error_lines(result)
    assert line.startswith(f"error: {config}, line ")
    problem = "expected ',' or ']', but got '<stream end>'"
    assert line.endswith(f"is not valid YAML: {problem}; correct it there")
    assert not (tmp_path / "run").exists()


def test_missing_or_unreadable_checkpoints_are_named_in_one_line(tmp_path):
    """In process: the CLI prints any UserError as one line, as the test above shows."""
    broken = tmp_path / "broken.ckpt"
    broken.write_bytes(b"not a checkpoint")
    missing = "ckpt_path 'missing.ckpt' is not a file; pass ckpt_path="
    unreadable = f"{broken} is not a checkpoint (torch.save writes zip archives, this is none)"
    best = tmp_path / "a-run" / "checkpoints" / "best.ckpt"
    best.parent.mkdir(parents=True)
    best.write_bytes(b"")

    def folder(path):
        return f"ckpt_path '{path}' is a folder; pass the checkpoint in it, e.g. ckpt_path={best}"

    cases = [
        (train, "train", "missing.ckpt", missing),
        (evaluate, "eval", "missing.ckpt", missing),
        (evaluate, "eval", broken, unreadable),
        (evaluate, "eval", best.parents[1], folder(best.parents[1])),  # the run's folder
        (evaluate, "eval", best.parent, folder(best.parent)),
    ]
    for task, name, ckpt, message in cases:
        with pytest.raises(UserError) as error:
            task(compose_config(name, tmp_path / name, [f"ckpt_path={ckpt}"]))
        assert str(error.value).startswith(message)
        assert "\n" not in str(error.value)
    assert not (tmp_path / "train").exists() and not (tmp_path / "eval").exists()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["data.batch_size=0"], "data.batch_size=0 must be a whole number of at least 1"),
        (["data.num_workers=-1"], "data.num_workers=-1 must be a whole number of at least 0"),
        (["data.batch_size=1.5"], "data.batch_size=1.5 must be a whole number of at least 1"),
        (["data.test_fraction=true"], "data.test_fraction=True must be a fraction from 0 to"),
        (["data.val_fraction=1.5"], "data.val_fraction=1.5 must be a fraction from 0 to below 1"),
        (["data.val_fraction=0"], "data.val_fraction=0 leaves no validation data"),
        (["data.test_fraction=0", "test=false"], "data.test_fraction=0 leaves no test data"),
        (
            ["data.val_fraction=0.6", "data.test_fraction=0.5"],
            "data.val_fraction=0.6 and data.test_fraction=0.5 leave nothing to train on",
        ),
        (
            ["model.optimizer.lr=abc"],
            "model.optimizer (lr='abc', weight_decay=0.0001) is refused by torch.optim.AdamW: ",
        ),
        (["model.optimizer.lr=-1"], "model.optimizer (lr=-1, weight_decay=0.0001) is refused"),
        (  # the classes of the digits, for the project's classifier, as the next two
            [*DIGITS, "+model.foo=1"],
            "Classifier.__init__() got an unexpected keyword argument 'foo': the keys of a "
            "config are the arguments of the class it names",
        ),
        (["+data.foo=1"], "ContractDataModule.__init__() got an unexpected keyword argument"),
        ([*DIGITS, "model.num_classes=1"], "model.num_classes=1, but the data has "),
        # A config of the user's own that extends no shipped one, as if written without defaults.
        (["~model._target_"], "the model config names no class (no _target_): begin it with "),
        (["~data._target_"], "the data config names no class (no _target_): begin it with "),
        (
            [*DIGITS, "model/net=mlp", "model.net.num_classes=1"],
            "model.net.num_classes=1, but the data ",
        ),
        (["model/net=mlp", "model.net.in_features=1"], "model.net.in_features=1, but the data "),
        (  # a setting of another kind's network (the MLP's depth), for the digits' CNN
            [*DIGITS, "+model.net.depth=3"],
            "model.net.depth: SmallCNN, the network for image inputs, has no such setting; it "
            "takes in_channels, image_size, num_classes, width, dropout, work_size",
        ),
        (
            ["model._target_={{ cookiecutter.package }}.models.Nope"],
            "model._target_={{ cookiecutter.package }}.models.Nope cannot be imported: ",
        ),
        (
            ["+callbacks.shell._target_=os.system", "+callbacks.shell.command=true"],
            "callbacks.shell: Target 'os.system' is blocklisted ",
        ),
        (["seed=abc"], "seed=abc must be a whole number from 0 to 4294967295"),
        # Hydra reads these as words, and any word would count as true.
        (["test=no"], "test=no must be true or false"),
        (["model.mode=up"], "model.mode=up is unknown; choose min or max"),
        (["auto_resume=off"], "auto_resume=off must be true or false"),
        (["trainer.enable_checkpointing=no"], "trainer.enable_checkpointing=no must be true or"),
        (["callbacks.early_stopping.check_finite=off"], "callbacks.early_stopping.check_finite="),
        (["model.compile=yes"], "model.compile=yes must be true or false"),
        (["data.persistent_workers=no"], "data.persistent_workers=no must be true or false"),
        # A word for a number, a list for a name: each fails mid-run, if at all.
        (["callbacks.early_stopping.min_delta=x"], "callbacks.early_stopping.min_delta=x must be"),
        (["trainer.log_every_n_steps=x"], "trainer.log_every_n_steps=x must be a whole number"),
        (["model.nets.image.dropout=x"], "model.nets.image.dropout=x must be a number"),
        (["+model.net.dropout=x"], "model.net.dropout=x must be a number"),
        (["callbacks.early_stopping.patience=2.5"], "callbacks.early_stopping.patience=2.5 must"),
        (
            ["callbacks.model_checkpoint.filename=[a,b]"],
            "callbacks.model_checkpoint.filename=['a', 'b'] must be one value, not a list",
        ),
        (["trainer.max_epochs=-5"], "trainer.max_epochs=-5 must be a whole number of at least -1"),
        (["trainer.check_val_every_n_epoch=0"], "trainer.check_val_every_n_epoch=0 must be"),
        # Lightning takes both: a ZeroDivisionError at the first step; no clipping at all.
        (["+trainer.accumulate_grad_batches=0"], "trainer.accumulate_grad_batches=0 must be a"),
        (["+trainer.gradient_clip_val=-1"], "trainer.gradient_clip_val=-1 must be 0 or more"),
        (["trainer.precision=17"], "Lightning refuses the trainer settings: Precision 17 is"),
        (
            ["callbacks.last_checkpoint.min_interval_s=-1"],
            "LastCheckpoint's min_interval_s=-1 must be seconds, 0 or more",
        ),
        (
            ["callbacks.confusion_matrix.min_interval_s=abc"],
            "callbacks.confusion_matrix.min_interval_s=abc must be a number",
        ),
        (["trainer.devices=0"], "Lightning refuses the trainer settings: `Trainer(devices=0)`"),
        pytest.param(
            ["trainer.accelerator=gpu"],
            "trainer.accelerator=gpu: this machine has no such device; train on the CPU with "
            "trainer=cpu",
            marks=NO_GPU,
        ),
        pytest.param(
            ["trainer=ddp"],
            "trainer.accelerator=gpu: this machine has no such device; train on the CPU with "
            "trainer=ddp_cpu (DDP over CPU processes) or trainer=cpu",
            marks=NO_GPU,
        ),
        # More GPUs than the machine has: none, or how many it has.
        (
            ["trainer=ddp", f"trainer.devices={GPUS + 1}"],
            f"trainer.devices={GPUS + 1}: this machine has {GPUS} gpu device"
            if GPUS
            else "trainer.accelerator=gpu: this machine has no such device",
        ),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)
def test_bad_settings_are_named_in_one_line_before_training(overrides, message, tmp_path):
    """In process: the CLI prints any UserError as one line, as the tests above show."""
    with pytest.raises(UserError) as error:
        train(compose_config("train", tmp_path, overrides))
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)
    assert not (tmp_path / "metrics.json").exists()


class ManyLogits(torch.nn.Module):
    """A network of the user's own whose last layer was written for other data's classes."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(64, 997)  # the digits' 8x8 pixels

    def forward(self, x):
        return self.layer(x.flatten(1))


def test_a_network_that_gives_another_number_of_outputs_is_one_line(tmp_path):
    for model in ("classifier", "regressor"):
        overrides = [*DIGITS, f"model={model}", "+model.net._target_=test_cli.ManyLogits"]
        overrides += ["data.task=regression"] if model == "regressor" else []
        with pytest.raises(UserError) as error:
            train(compose_config("train", tmp_path / model, [*overrides, "trainer.max_epochs=1"]))
        assert re.fullmatch(
            r"ManyLogits gives outputs of shape \((\d+), 997\) for a batch of \1, and the "
            r"(Classifier|Regressor) takes \(\1, (10|1)\): one (logit per class|number a sample)",
            str(error.value),
        )


def test_a_key_the_network_does_not_take_is_one_line(tmp_path):
    """Inside the model, whichever network the data's kind is given: the network's line."""
    overrides = [f"+model.nets.{kind}.foo=1" for kind in ("image", "table", "text")]
    with pytest.raises(UserError) as error:
        train(compose_config("train", tmp_path, overrides))
    assert re.fullmatch(
        r"\w+\.__init__\(\) got an unexpected keyword argument 'foo': the keys of a config are "
        r"the arguments of the class it names",
        str(error.value),
    )


def test_a_message_that_spans_lines_is_printed_as_one(capsys):
    with pytest.raises(SystemExit) as stopped:
        exit_with_error("Lightning refuses:\n  You requested gpu: [0, 1]\n\n But it has: [0]\n")
    assert stopped.value.code == 1
    assert capsys.readouterr().err == (
        "error: Lightning refuses: You requested gpu: [0, 1] But it has: [0]\n"
    )


def test_more_devices_than_one_on_the_cpu_say_how_many_processes_start(tmp_path, caplog):
    cfg = compose_config("train", tmp_path, ["trainer.accelerator=cpu", "trainer.devices=4"])
    with caplog.at_level("INFO"):
        trainer = build_trainer(cfg)  # the processes start with fit, not here
    assert (trainer.num_devices, type(trainer.strategy).__name__) == (4, "DDPStrategy")
    assert "trainer.devices=4 on the CPU: starting 4 processes (DDP over gloo)" in caplog.text


@pytest.mark.parametrize(
    ("script", "setting", "name", "length"),
    [
        ("predict.py", "hydra.run.dir", "x" * 256, 256),
        ("predict.py", "output_dir", "x" * 256, 256),
        ("export.py", "hydra.run.dir", "x" * 256, 256),
        # With the .staging folder beside it.
        ("export.py", "output_dir", "x" * 250, 258),
    ],
    ids=["predict-run-dir", "predict-output-dir", "export-run-dir", "export-staging"],
)
def test_a_name_longer_than_the_file_system_allows_is_one_line(
    script, setting, name, length, exported_run, trained_run, tmp_path
):
    given = {
        "predict.py": [f"model={exported_run}", f"input={tmp_path / 'none.npy'}"],
        "export.py": [f"ckpt_path={trained_run / 'checkpoints' / 'best.ckpt'}"],
    }
    folder = tmp_path / name
    run_dir = [] if setting == "hydra.run.dir" else [f"hydra.run.dir={tmp_path / 'run'}"]
    result = run_cli(script, *given[script], f"{setting}={folder}", *run_dir, timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert error_lines(result) == [
        f"error: {setting}={folder}: the name {name[:24]}... is {length} bytes, longer than the "
        "255 the file system allows; choose a shorter one"
    ]
    assert not list(tmp_path.glob("x*"))


@pytest.mark.slow  # an export.py process
def test_an_export_to_the_current_folder_is_written_there(trained_run, tmp_path):
    here = tmp_path / "here"
    here.mkdir()
    best = trained_run / "checkpoints" / "best.ckpt"
    overrides = [f"ckpt_path={best}", "formats=[onnx]", "output_dir=.", *FAST_LATENCY]
    result = run_cli("export.py", *overrides, f"hydra.run.dir={tmp_path / 'run'}", cwd=here)
    assert result.returncode == 0, result.stderr[-3000:]
    assert {"model.onnx", "manifest.json"} <= {path.name for path in here.iterdir()}
    assert not (tmp_path / "here.staging").exists()


def limit_file_size(size: int):
    """For `preexec_fn`: files can grow to `size` bytes, after which a write fails with EFBIG,
    the way a full disk fails one with ENOSPC."""

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the process is killed instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    return limit


@pytest.mark.slow  # an export.py process
def test_a_full_disk_during_an_export_names_its_folder_and_leaves_no_staging(digits_run, tmp_path):
    export_dir = tmp_path / "disk" / "export"
    overrides = [  # the CNN of the digits: a model.onnx of a known size
        f"ckpt_path={digits_run / 'checkpoints' / 'best.ckpt'}",
        "formats=[onnx]",
        f"output_dir={export_dir}",
        f"hydra.run.dir={tmp_path / 'run'}",
        *FAST_LATENCY,
    ]
    # The run folder's files are smaller than this, model.onnx is larger.
    result = run_cli("export.py", *overrides, preexec_fn=limit_file_size(100_000), timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert error_lines(result) == [
        f"error: cannot write to {export_dir}: File too large; write elsewhere with output_dir=..."
    ]
    assert list((tmp_path / "disk").iterdir()) == []


@pytest.mark.parametrize(
    "case",
    [
        "run dir is a file",
        "under a file",
        "not writable",
        "output dir is a file",
        "output dir holds other files",
        "output dir not writable",
        "disk full",
        pytest.param("full at checkpoint", marks=SLOW),
        pytest.param("wandb", marks=SLOW),
    ],
)
def test_environment_problems_give_one_line_and_leave_nothing_half_written(case, tmp_path):
    run_dir, file = tmp_path / "run", tmp_path / "file"
    file.write_text("kept")
    cannot_write = "write elsewhere with hydra.run.dir=... (or paths.log_dir=...)"
    # Each: overrides, start_cli options, the start of the error line.
    cases = {
        "run dir is a file": ([f"hydra.run.dir={file}"], {}, f"hydra.run.dir {file} is a file"),
        # The task's files apart from the run directory: checked as it is.
        "output dir is a file": (
            [f"hydra.run.dir={run_dir}", f"paths.output_dir={file}"],
            {},
            f"paths.output_dir {file} is a file, not a folder: choose another paths.output_dir",
        ),
        "output dir holds other files": (
            [f"hydra.run.dir={run_dir}", f"paths.output_dir={tmp_path}"],
            {},
            f"{tmp_path} is not empty and holds no run (no .hydra/config.yaml): choose a new or "
            "empty paths.output_dir",
        ),
        "output dir not writable": (
            [f"hydra.run.dir={run_dir}", "paths.output_dir=/sys/no-runs-here/x"],
            {},
            "cannot write to /sys/no-runs-here/x: ",
        ),
        "under a file": (
            [f"hydra.run.dir={file / 'run'}"],
            {},
            f"cannot write to {file / 'run'}: Not a directory; {cannot_write}",
        ),
        # sysfs takes no new folders, from root either; read-only where containers mount it so.
        "not writable": (
            ["paths.log_dir=/sys/no-runs-here"],
            {},
            "cannot write to /sys/no-runs-here/",
        ),
        "disk full": (
            [f"hydra.run.dir={run_dir}"],
            {"preexec_fn": limit_file_size(0)},
            f"cannot write to {run_dir}: File too large; {cannot_write}",
        ),
        # The checkpoint is the first file larger than this: the run trains until it saves one.
        # No loader workers: the limit holds for the shared memory that hands over their batches.
        "full at checkpoint": (
            [
                f"hydra.run.dir={run_dir}",
                "trainer.max_epochs=1",
                "+trainer.limit_train_batches=2",
                "data.num_workers=0",
            ],
            {"preexec_fn": limit_file_size(100_000)},
            f"cannot write to {run_dir}: File too large; {cannot_write}",
        ),
        # No login anywhere W&B looks: the environment, ~/.netrc, a .env file.
        "wandb": (
            [f"hydra.run.dir={run_dir}", "logger=wandb"],
            {
                "cwd": tmp_path,
                "env": {
                    "HOME": str(tmp_path),
                    "WANDB_API_KEY": None,
                    "WANDB_MODE": None,
                    "NETRC": None,
                },
            },
            "logger=wandb cannot start a run: ",
        ),
    }
    overrides, options, message = cases[case]
    quiet = QUIET[1:] if case == "wandb" else QUIET  # QUIET[0] chooses the CSV logger
    result = run_cli("train.py", *quiet, *overrides, timeout=120, **options)
    assert result.returncode == 1, result.stderr[-3000:]
    (line,) = error_lines(result)
    assert line.startswith(f"error: {message}")
    assert "Traceback" not in result.stderr
    assert "WARNING" not in result.stderr  # e.g. wandb's about an option Lightning passes
    assert file.read_text() == "kept"
    assert not list(tmp_path.rglob("*.partial*"))
    if case == "wandb":
        assert "`wandb login`" in line and "WANDB_MODE=offline" in line


@pytest.mark.parametrize("script", ["example_images.py", "example_tables.py", "example_texts.py"])
def test_an_example_script_shows_its_use_and_refuses_a_file_for_its_folder(script, tmp_path):
    mine = tmp_path / "notes.txt"
    mine.write_text("mine")
    command = [sys.executable, str(ROOT / "scripts" / script)]

    def run(*arguments):
        return subprocess.run(
            [*command, *arguments], cwd=tmp_path, capture_output=True, text=True, timeout=60
        )

    shown = run("--help")
    assert shown.returncode == 0 and f"python scripts/{script} <folder>" in shown.stdout
    refused = run(str(mine))
    assert refused.returncode == 1
    line = f"error: {mine} is a file; pass a folder to write the example data into\n"
    assert refused.stderr == line
    assert run().returncode == 1
    assert sorted(path.name for path in tmp_path.iterdir()) == ["notes.txt"]  # no "--help" folder
    assert mine.read_text() == "mine"


def test_ctrl_c_while_an_example_script_writes_is_one_line(tmp_path):
    folder = tmp_path / "images"
    script = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "example_images.py"), str(folder)],
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not any(folder.rglob("*.png")) and time.monotonic() < deadline:  # writing
        time.sleep(0.01)
    script.send_signal(signal.SIGINT)
    _, stderr = script.communicate(timeout=60)
    assert script.returncode == 128 + signal.SIGINT
    assert stderr == "stopped by Ctrl-C; run the script again to write the whole example\n"
