"""Each entry of upstream.py against the installed libraries: a test that fails here names the
upstream change to adapt the entry to (or the entry to remove)."""

import asyncio
import collections
import csv
import importlib
import inspect
import io
import logging
import pickle
import re
import signal
import socket
import sys
import warnings
from argparse import Namespace
from functools import partial

import hydra
import pytest
import pytorch_lightning as pl
import torch
import uvicorn
import wandb
from conftest import run_code
from hydra.errors import CompactHydraException
from pytorch_lightning.callbacks import ModelSummary
from pytorch_lightning.demos.boring_classes import BoringModel
from pytorch_lightning.loggers import TensorBoardLogger, WandbLogger
from pytorch_lightning.plugins.io import AsyncCheckpointIO, TorchCheckpointIO
from pytorch_lightning.utilities import CombinedLoader
from pytorch_lightning.utilities.data import has_len_all_ranks
from pytorch_lightning.utilities.exceptions import MisconfigurationException
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.data import DataLoader, IterableDataset

from {{ cookiecutter.package }} import upstream
from {{ cookiecutter.package }}.loggers import CSVLogger

QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}


def trainer(**options) -> pl.Trainer:
    settings = {"accelerator": "cpu", "devices": 1, "enable_checkpointing": False, **QUIET}
    return pl.Trainer(**{**settings, **options})


class Stepping(BoringModel):
    """Does `what` in its first training step."""

    def __init__(self, what):
        super().__init__()
        self.what = what

    def training_step(self, batch, batch_idx):
        self.what()
        return super().training_step(batch, batch_idx)


def test_lightning_s_sigterm_handler_calls_the_notifier_that_is_replaced():
    fitting = trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=0)
    upstream.record_sigterm_without_collectives(fitting)

    def sigterm():
        # Lightning's handlers are installed as fit starts: without them SIGTERM would end pytest.
        handlers = signal.getsignal(signal.SIGTERM).signal_handlers
        assert handlers[0].__name__ == "notify"
        signal.raise_signal(signal.SIGTERM)

    with pytest.raises(SystemExit) as stopped:
        fitting.fit(Stepping(sigterm))
    assert fitting.received_sigterm  # what the replacement records, where Lightning reads it
    assert upstream.signal_that_ended(stopped.value) == signal.SIGTERM
    # Still needed: Lightning's own notifier broadcasts from inside the handler, and its training
    # loop broadcasts the record at each step.
    from pytorch_lightning.loops.training_epoch_loop import _TrainingEpochLoop
    from pytorch_lightning.trainer.connectors.signal_connector import _SignalConnector

    assert "broadcast(" in inspect.getsource(_SignalConnector._sigterm_notifier_fn)
    assert "received_sigterm" in inspect.getsource(_TrainingEpochLoop._broadcast_sigterm_tensor)


def test_ctrl_c_in_a_trainer_call_ends_in_a_system_exit_that_keeps_it():
    def interrupt():
        raise KeyboardInterrupt

    ctrl_c = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit) as stopped:
            trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=0).fit(
                Stepping(interrupt)
            )
    finally:
        signal.signal(signal.SIGINT, ctrl_c)  # Lightning ignores Ctrl-C once it has one
    assert upstream.signal_that_ended(stopped.value) == signal.SIGINT
    assert upstream.signal_that_ended(SystemExit(2)) is None


def test_the_ddp_launcher_keeps_the_ranks_it_starts_in_the_list_its_observer_watches():
    ddp = trainer(devices=2, strategy="ddp")
    launcher = ddp.strategy.launcher
    assert upstream.launched_ranks(ddp) is launcher.procs == []
    assert "_launch_process_observer(self.procs)" in inspect.getsource(type(launcher).launch)
    assert upstream.launched_ranks(trainer()) == []  # no launcher


def test_resuming_past_max_epochs_is_refused_with_the_text_matched(tmp_path):
    short = {"limit_train_batches": 1, "limit_val_batches": 0}
    first = trainer(max_epochs=2, **short)
    first.fit(BoringModel())
    first.save_checkpoint(tmp_path / "epoch2.ckpt")
    with pytest.raises(MisconfigurationException) as refused:
        trainer(max_epochs=1, **short).fit(
            BoringModel(), ckpt_path=tmp_path / "epoch2.ckpt", weights_only=True
        )
    assert upstream.restored_past_max_epochs(refused.value)
    assert not upstream.restored_past_max_epochs(MisconfigurationException("other"))


class Inherited(pl.Callback):
    def on_train_start(self, trainer, pl_module):
        self.calls["on_train_start"] += 1


class Counting(Inherited):
    """Counts the calls of the hooks it defines or inherits, and logs from one of them."""

    def __init__(self):
        self.calls = collections.Counter()

    def setup(self, trainer, pl_module, stage):
        self.calls[f"setup {stage.value}"] += 1

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.calls["on_before_optimizer_step"] += 1

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.calls["on_train_batch_end"] += 1
        pl_module.log("batch", float(batch_idx))  # which Lightning allows by the hook's name


def record_module(modules, trainer, pl_module):
    modules.append(pl_module)


def test_without_a_profiler_callbacks_get_the_hooks_they_define_as_lightning_calls_them():
    lightning_s = upstream.call_callbacks_that_define_each_hook()
    assert list(inspect.signature(lightning_s).parameters) == [
        *("trainer", "hook_name", "args", "monitoring_callbacks", "kwargs")
    ]
    assert "pl_module._current_fx_name = hook_name" in inspect.getsource(lightning_s)
    calls = {}
    for profiler in (None, "simple"):  # the project's calls, then Lightning's own
        counting, assigned, seen = Counting(), pl.Callback(), []
        # A hook set on the object rather than defined by its class.
        assigned.on_train_epoch_start = partial(record_module, seen)
        fitting = trainer(
            max_epochs=2, limit_train_batches=3, limit_val_batches=1, profiler=profiler,
            callbacks=[counting, assigned],
        )  # fmt: skip
        model = BoringModel()
        fitting.fit(model)
        assert seen == [model, model]
        calls[profiler] = counting.calls, fitting.callback_metrics["batch"].item()
    assert calls[None] == calls["simple"]
    assert calls[None][0] == {
        "setup fit": 1, "on_train_start": 1, "on_before_optimizer_step": 6, "on_train_batch_end": 6
    }  # fmt: skip


def test_a_lightning_module_s_trainer_property_is_off_while_scripting():
    module = pl.LightningModule()
    with pytest.raises(RuntimeError, match="not attached to a `Trainer`"):
        module.trainer  # noqa: B018
    with upstream.scripting_lightning_module():
        assert module.trainer is None


def test_lightning_passes_anonymous_to_wandb_init_and_wandb_warns_about_it(tmp_path, capsys):
    logger = WandbLogger(offline=True, save_dir=str(tmp_path))
    assert "anonymous" in logger._wandb_init
    assert "wandb.init(**self._wandb_init)" in inspect.getsource(type(logger).experiment.fget)
    upstream.leave_out_wandb_anonymous(logger)
    assert "anonymous" not in logger._wandb_init
    wandb.Settings(anonymous=None)
    assert "anonymous setting has no effect" in capsys.readouterr().err


class Refusing(TorchCheckpointIO):
    def save_checkpoint(self, checkpoint, path, storage_options=None):
        raise OSError(f"cannot write {path}")


def test_a_checkpoint_written_in_lightning_s_writer_thread_and_a_failed_write_raised(tmp_path):
    writer = AsyncCheckpointIO(TorchCheckpointIO())
    upstream.write_in_background(writer, {"w": torch.ones(2)}, tmp_path / "a.ckpt")
    writer.teardown()  # waits for the thread, as the end of fitting does
    assert torch.equal(torch.load(tmp_path / "a.ckpt")["w"], torch.ones(2))

    failing = AsyncCheckpointIO(Refusing())
    with pytest.raises(OSError, match="cannot write"):  # by the next save or at the end
        upstream.write_in_background(failing, {}, tmp_path / "b.ckpt")
        failing.teardown()


def test_tensorboard_names_and_event_writer_are_those_of_lightning_s_logger(tmp_path):
    logger = TensorBoardLogger(tmp_path, name=None, version="", prefix="fold1")
    assert upstream.tensorboard_names(logger, {"loss": 0.5}) == {"fold1-loss": 0.5}
    writer = upstream.event_file_writer(logger.experiment)
    assert writer is logger.experiment.file_writer  # the one add_scalar writes through
    logger.log_metrics({"loss": 0.5}, step=3)  # Lightning's own, one event each
    logger.experiment.flush()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("fold1-loss")] == [(3, 0.5)]


def test_a_csv_logger_of_a_resumed_run_goes_on_with_the_metrics_file_it_finds(tmp_path):
    first = CSVLogger(tmp_path, name="csv", version="")
    first.log_metrics({"val/loss": 0.5, "epoch": 0}, step=9)
    first.finalize("success")
    resumed = CSVLogger(tmp_path, name="csv", version="")  # as a rerun of the command starts
    resumed.log_metrics({"train/loss": 0.25, "epoch": 1}, step=19)  # a column the file lacks
    resumed.finalize("success")
    rows = list(csv.DictReader((tmp_path / "csv" / "metrics.csv").open()))
    assert [(row["step"], row["val/loss"], row["train/loss"]) for row in rows] == [
        ("9", "0.5", ""),
        ("19", "", "0.25"),
    ]


def test_torch_names_the_global_it_refuses_to_unpickle():
    pickled, plain = io.BytesIO(), io.BytesIO()
    torch.save({"args": Namespace(lr=0.1)}, pickled)
    torch.save({"state_dict": {"w": torch.zeros(2)}}, plain)
    with pytest.raises(pickle.UnpicklingError) as refused:
        torch.load(io.BytesIO(pickled.getvalue()), weights_only=True)
    assert upstream.refused_a_global(refused.value)
    truncated = io.BytesIO(plain.getvalue()[:-64])
    with pytest.raises(Exception) as damaged:  # noqa: B017 (what torch raises differs by damage)
        torch.load(truncated, weights_only=True)
    assert not upstream.refused_a_global(damaged.value)


def test_torch_s_deprecation_of_torch_jit_is_told_apart():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.jit.trace(torch.nn.Linear(2, 2), torch.zeros(1, 2))
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert deprecations and all(upstream.is_jit_deprecation(w) for w in deprecations)


class BringingItsCallbacks(BoringModel):
    """A model with a callback of its own of a type the Trainer has too, as a pretrained
    backbone brings its freezing callback."""

    def configure_callbacks(self):
        return [ModelSummary()]


class SizedStream(IterableDataset):
    """An iterable dataset that knows its length, as LitData's StreamingDataset does."""

    def __len__(self):
        return 1

    def __iter__(self):
        return iter([0])


def test_each_noise_pattern_matches_what_lightning_emits():
    import transformers  # model/net=pretrained's backbones

    config = transformers.BertConfig(
        vocab_size=8,
        hidden_size=4,
        num_hidden_layers=1,
        num_attention_heads=1,
        intermediate_size=4,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        iter(CombinedLoader({"a": [1, 2]}, "max_size_cycle"))
        has_len_all_ranks(DataLoader(SizedStream()), trainer().strategy)
        assert not transformers.BertModel(config).is_gradient_checkpointing
    # As warnings.filterwarnings matches: from the start, ignoring case.
    for pattern in upstream.NOISE["warning"]:
        assert any(re.match(pattern, str(w.message), re.IGNORECASE) for w in caught), pattern

    class Collect(logging.Handler):
        records: list[str] = []

        def emit(self, record):
            self.records.append(record.getMessage())

    collect = Collect()
    loggers = [logging.getLogger(name) for name in upstream.LIGHTNING_LOGGERS]
    # The suite filters the noise as the commands do (conftest.py): not while it is looked for.
    filters = {logger: logger.filters[:] for logger in loggers}
    for logger in loggers:
        logger.addHandler(collect)
        logger.filters.clear()
    try:
        fitting = trainer(callbacks=[ModelSummary()], enable_model_summary=True, max_steps=1)
        fitting.fit(BringingItsCallbacks())
    finally:
        for logger in loggers:
            logger.removeHandler(collect)
            logger.filters[:] = filters[logger]
    for pattern in upstream.NOISE["log"]:
        assert any(re.match(pattern, message) for message in collect.records), pattern


def test_the_onnx_export_loggers_exist():
    for name in upstream.ONNX_EXPORT_LOGGERS:
        importlib.import_module(name)
        assert any(logger.startswith(name) for logger in logging.root.manager.loggerDict), name
    private = importlib.import_module("torch.onnx._internal.exporter._registration")
    assert private.logger.name == "torch.onnx._internal.exporter._registration"


@pytest.fixture
def hydra_app(tmp_path, monkeypatch):
    """Runs a Hydra app of one config with a group `model` holding `a`, as `app <overrides>`."""
    (tmp_path / "model").mkdir()
    (tmp_path / "app.yaml").write_text("defaults:\n  - model: a\n  - _self_\nx: 1\n")
    (tmp_path / "model" / "a.yaml").write_text("y: 2\n")
    monkeypatch.chdir(tmp_path)

    @hydra.main(version_base="1.3", config_path=str(tmp_path), config_name="app")
    def main(cfg):
        return cfg

    def run(*overrides):
        monkeypatch.setattr(sys, "argv", ["app", *overrides])
        return main()

    return run


@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("model=b", "In 'app': Could not find 'model/b'; available options in 'model': a"),
        ("z=1", "Could not override 'z'; to append to your config use +z=1; key 'z' is not in "
         "struct"),
        ("x=[1", "no viable alternative at input '[1'; see https://hydra.cc/docs/1.2/advanced/"
         "override_grammar/basic for details"),
    ],
    ids=["unknown choice", "unknown key", "bad syntax"],
)  # fmt: skip
def test_hydra_raises_its_report_with_hydra_full_error_and_it_fits_one_line(
    hydra_app, monkeypatch, override, line
):
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    with pytest.raises(CompactHydraException) as error:
        hydra_app(override)
    assert upstream.hydra_error_line(error.value) == line
    monkeypatch.delenv("HYDRA_FULL_ERROR")
    with pytest.raises(SystemExit):  # without it: Hydra prints its report and exits
        hydra_app(override)


def test_optuna_s_error_for_a_study_without_a_complete_trial_is_the_one_matched():
    import optuna

    study = optuna.create_study()
    study.tell(study.ask(), state=optuna.trial.TrialState.FAIL)
    with pytest.raises(ValueError) as error:
        study.best_trial  # noqa: B018 (the property raises)
    assert upstream.no_trial_completed(error.value)
    assert not upstream.no_trial_completed(ValueError("another"))


def test_hydra_help_lists_the_same_config_groups_with_one_repository_copy():
    """train.py --help with the listing made once, against Hydra's own listing of every group."""

    def help_text(hydra_own: bool) -> str:
        code = (
            "import sys\n"
            "sys.argv = ['train.py', '--help']\n"
            "from {{ cookiecutter.package }} import upstream\n"
            f"if {hydra_own}: upstream.listing_config_groups_once = lambda: None\n"
            "from {{ cookiecutter.package }}.cli import train\n"
            "train()\n"
        )
        result = run_code(code)
        assert result.returncode == 0, result.stderr
        return result.stdout

    once = help_text(hydra_own=False)
    assert "data: " in once and "optimized_metric" in once  # the groups and the config
    assert once == help_text(hydra_own=True)


def test_uvicorn_s_protocol_with_a_read_deadline_closes_slow_and_oversized_headers():
    # A connection answered for longer than the deadline keeps it: it counts from each answer.
    async def app(scope, receive, send):  # answers every request "ok"
        if scope["type"] == "http":
            headers = [(b"content-length", b"2")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b"ok"})

    async def run():
        protocol = upstream.read_deadline_protocol(read_timeout=0.5, max_header_bytes=1000)
        # As uvicorn hands it to the worker processes it spawns.
        protocol = pickle.loads(pickle.dumps(protocol))
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, http=protocol, log_level="error")
        )
        serving = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.05)

        async def sent(data: bytes) -> bytes:
            """What the server sends until it closes a connection on which `data` was sent."""
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(data)
            got = await asyncio.wait_for(reader.read(), 30)
            writer.close()
            return got

        async def busy() -> bytes:
            """Four requests 0.25 s apart, over twice the deadline, then one never completed."""
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            for _ in range(4):
                writer.write(request)
                await reader.readuntil(b"ok")
                await asyncio.sleep(0.25)
            writer.write(b"G")
            got = await asyncio.wait_for(reader.read(), 30)
            writer.close()
            return got

        request = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        try:
            return await asyncio.gather(
                sent(b"GET / HTTP/1.1\r\nHost: 12"),  # never completed
                sent(b"GET / HTTP/1.1\r\n" + b"X-A: b\r\n" * 200),  # 1,600 bytes of headers
                sent(request + b"G"),  # answered, then the next request never completed
                busy(),
            )
        finally:
            server.should_exit = True
            await serving

    partial, oversized, after_an_answer, after_a_busy_while = asyncio.run(run())
    assert partial == oversized == after_a_busy_while == b""
    assert after_an_answer.startswith(b"HTTP/1.1 200 ") and after_an_answer.endswith(b"ok")


def test_litdata_s_processor_sets_the_sigint_handler_that_is_replaced(monkeypatch):
    from litdata.processing.data_processor import DataProcessor

    source = inspect.getsource(DataProcessor.run)
    assert "signal.signal(signal.SIGINT, self._signal_handler)" in source
    assert "os._exit(0)" in inspect.getsource(DataProcessor._signal_handler)
    monkeypatch.setattr(DataProcessor, "_signal_handler", DataProcessor._signal_handler)
    upstream.interruptible_chunk_writing()
    stopped = []
    processor = Namespace(stop_queues=[Namespace(put=stopped.append)], workers=[])
    with pytest.raises(KeyboardInterrupt):
        DataProcessor._signal_handler(processor, signal.SIGINT, None)
    assert stopped == [None]  # the workers are told to stop, as LitData's handler tells them


def test_litdata_builds_obstore_s_client_from_the_options_that_allow_plain_http(monkeypatch):
    from litdata.streaming import downloader

    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    monkeypatch.delitem(downloader._OBSTORE_CLIENT_OPTIONS, "allow_http", raising=False)
    upstream.allow_plain_http_object_storage()
    assert downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] == "true"
    source = inspect.getsource(downloader._build_obstore_s3_store)
    assert "client_options=_OBSTORE_CLIENT_OPTIONS" in source
