"""Where this project relies on other libraries' internals: private attributes, and messages
matched by their text. Each entry says what it relies on and the version it was checked with;
tests/test_upstream.py checks each against the installed libraries, so that an upgrade which
changes one fails there, by name, rather than somewhere in a run. Where a library gives an
option for the job, the project uses the option instead, and nothing here.

No dependencies at import: console.py reads the noise filters, and predict and serve run
without torch and Lightning. Each entry imports its library itself.
"""

import csv
import logging
import os
import pickle
import signal
import warnings
from collections.abc import Mapping
from contextlib import AbstractContextManager
from functools import cache, partial
from typing import Any

# --- Lightning (pytorch_lightning 2.6.6) and torch (2.13) ---------------------------------------

# Messages a user can do nothing about, matched by the start of their text (console.py filters
# them once per process). Each names why.
NOISE = {
    # FutureWarning of torch 2.13 from Lightning's pytree helper (CombinedLoader, every
    # Trainer call), which checks for a deprecated torch class.
    "warning": [
        r"`isinstance\(treespec, LeafSpec\)` is deprecated",
        # transformers 5 (model/net=pretrained) on every export of a backbone: a property that
        # torch.export and tracing read, renamed upstream.
        r"`is_gradient_checkpointing` is deprecated",
        # Lightning on every loader of data=stream: LitData's StreamingDataset gives each worker
        # of each rank its own share, whose length it knows.
        r"Your `IterableDataset` has `__len__` defined",
    ],
    "log": [
        # Advertisements for optional cloud services, logged by every Trainer.
        r"💡 Tip: For seamless cloud",
        # The project's rich model summary replaces Lightning's default one on purpose.
        r"Trainer already configured with model summary callbacks",
        # Testing after fitting asks the model for its callbacks again (a pretrained backbone's
        # freezing), and Lightning says the new one replaces the one it already has.
        r"The following callbacks returned in `LightningModule.configure_callbacks` will override",
    ],
}
# The loggers that Lightning's rank_zero_info and rank_zero_warn write to.
LIGHTNING_LOGGERS = (
    "pytorch_lightning.utilities.rank_zero",
    "lightning_fabric.utilities.rank_zero",
)


def record_sigterm_without_collectives(trainer) -> None:
    """Lightning 2.6's SIGTERM handler broadcasts a tensor from inside the handler, that is at
    whatever point of a step the signal lands: the broadcast can pair with another rank's gradient
    all-reduce, and both ranks wait for ever. This one only records the signal and passes it to
    the ranks this process started, as Lightning's does; Lightning's training loop broadcasts rank
    0's record at the start of every step, so that all ranks stop after the same one. The rest of
    Lightning's signal handling stays, SLURM's SIGUSR1 checkpoint-and-requeue among it.

    Relies on: `Trainer._signal_connector`, whose `register_signal_handlers` (called by every
    Trainer call) installs `_sigterm_notifier_fn` first among the SIGTERM handlers, and whose
    `received_sigterm` is what `trainer.received_sigterm` reads."""
    connector, launcher = trainer._signal_connector, trainer.strategy.launcher

    def notify(signum, frame) -> None:
        if not connector.received_sigterm and launcher is not None:
            launcher.kill(signum)
        connector.received_sigterm = True

    connector._sigterm_notifier_fn = notify


def launched_ranks(trainer) -> list:
    """The processes of the other ranks that Lightning's DDP launcher started from this one;
    empty under any other launcher. Relies on: `_SubprocessScriptLauncher.procs`, the list that
    its observer thread watches (it kills this process once a child in it has failed)."""
    return getattr(trainer.strategy.launcher, "procs", [])


def signal_that_ended(error: SystemExit) -> int | None:
    """The signal that ended a Trainer call which raised `error`, if one did. After SIGTERM
    Lightning ends fit or test at the next step with SIGTERMException, a SystemExit without a
    code; after Ctrl-C it calls sys.exit(1) inside its `except KeyboardInterrupt`, which the
    SystemExit keeps as its context."""
    from pytorch_lightning.utilities.exceptions import SIGTERMException

    if isinstance(error, SIGTERMException):
        return signal.SIGTERM
    if isinstance(error.__context__, KeyboardInterrupt):
        return signal.SIGINT
    return None


@cache
def call_callbacks_that_define_each_hook() -> Any:
    """Lightning calls every callback hook on every callback, the base class's empty method too,
    and builds each call's profiler label even when the profiler records nothing (for a
    ModelCheckpoint, a repr of its settings): 7 hooks a training step on each of the example's 13
    callbacks, most of which define two or three of them, 4 ms of its 250 ms epoch (the
    template's benchmarks/README.md). Once this has run, a trainer whose profiler records nothing
    calls each hook only on the callbacks that define it, with the same arguments; a trainer with
    a profiler keeps Lightning's own calls, which it times one by one. Returns Lightning's.

    Relies on: `pytorch_lightning.trainer.call._call_callback_hooks(trainer, hook_name, *args,
    monitoring_callbacks=None, **kwargs)`, through which Lightning calls every callback hook, and
    its setting `_current_fx_name` on the module around the calls (`self.log` checks it)."""
    from pytorch_lightning import Callback
    from pytorch_lightning.profilers import PassThroughProfiler
    from pytorch_lightning.trainer import call

    lightning_s = call._call_callback_hooks

    def call_callback_hooks(trainer, hook_name, *args, **kwargs):
        profiled = not isinstance(trainer.profiler, PassThroughProfiler)
        if profiled or "monitoring_callbacks" in kwargs:  # the latter: some callbacks only
            lightning_s(trainer, hook_name, *args, **kwargs)
            return
        module = trainer.lightning_module
        if module:
            called_in, module._current_fx_name = module._current_fx_name, hook_name
        empty = getattr(Callback, hook_name)
        for callback in trainer.callbacks:
            hook = getattr(callback, hook_name)
            # A method the callback's class inherits from Callback does nothing.
            if callable(hook) and getattr(hook, "__func__", None) is not empty:
                hook(trainer, module, *args, **kwargs)
        if module:
            module._current_fx_name = called_in

    call._call_callback_hooks = call_callback_hooks
    return lightning_s


def write_in_background(io, checkpoint: dict, path, storage_options=None) -> None:
    """Hands `checkpoint`, whose tensors the caller has copied, to the writer thread of Lightning's
    AsyncCheckpointIO `io` without the copy of them that its own `save_checkpoint` takes; an
    earlier write's error is raised here, and by `teardown` when fitting ends, as Lightning's.
    Relies on: `AsyncCheckpointIO._ensure_setup`, `_executor` (its one thread) and `_error`."""

    def write() -> None:
        try:
            io.checkpoint_io.save_checkpoint(checkpoint, path, storage_options)
        except BaseException as error:
            io._error = error

    io._ensure_setup()
    io._executor.submit(write)
    if io._error:
        raise io._error


def tensorboard_names(logger, metrics: Mapping) -> Mapping:
    """`metrics` named as Lightning's TensorBoardLogger `logger` names them in its files: after
    its `prefix`. Relies on: `lightning_fabric.utilities.logger._add_prefix` and the logger's
    `_prefix`, which its own `log_metrics` uses."""
    from lightning_fabric.utilities.logger import _add_prefix

    return _add_prefix(metrics, logger._prefix, logger.LOGGER_JOIN_CHAR)


def event_file_writer(writer) -> Any:
    """The FileWriter through which torch's SummaryWriter `writer` writes each event (its
    `add_summary`). Relies on: `SummaryWriter._get_file_writer()`, which its `add_scalar` uses."""
    return writer._get_file_writer()


def appending_csv_writer(log_dir: str) -> Any:
    """Lightning's CSV ExperimentWriter for `log_dir`, which goes on with the metrics.csv it
    finds there, in its columns: Lightning's deletes the file. Relies on: the writer's
    `_check_log_dir_exists()`, which deletes it as the writer starts, and `metrics_keys`, the
    columns its `save` writes (and rewrites the file with, where new ones come)."""
    from pytorch_lightning.loggers.csv_logs import ExperimentWriter

    class AppendingWriter(ExperimentWriter):
        def _check_log_dir_exists(self) -> None:
            if self._fs.isfile(self.metrics_file_path):
                with self._fs.open(self.metrics_file_path, "r", newline="") as file:
                    self.metrics_keys = next(csv.reader(file), [])

    return AppendingWriter(log_dir=log_dir)


def restored_past_max_epochs(error: Exception) -> bool:
    """Whether Lightning refused to resume a checkpoint whose epoch is past `max_epochs`: a
    MisconfigurationException told apart from the others by its text."""
    return "You restored a checkpoint with current_epoch" in str(error)


def missing_cpp_compiler() -> str | None:
    """Why torch.compile on the CPU cannot build the code it generates (no C++ compiler), or
    None. Relies on: `torch._inductor.cpp_builder.get_cpp_compiler()`, which inductor calls as
    it compiles the first step, and its `InvalidCxxCompiler`."""
    from torch._inductor.cpp_builder import get_cpp_compiler
    from torch._inductor.exc import InvalidCxxCompiler

    try:
        get_cpp_compiler()
    except InvalidCxxCompiler as error:
        return str(error).strip().splitlines()[0]
    return None


def scripting_lightning_module() -> AbstractContextManager:
    """While TorchScript compiles a LightningModule: its `trainer` property, which TorchScript
    reads as it reads every property, returns None instead of raising outside a Trainer. Relies
    on: `pytorch_lightning.core.module._jit_is_scripting`, which Lightning's own
    `to_torchscript` uses the same way."""
    from pytorch_lightning.core.module import _jit_is_scripting

    return _jit_is_scripting()


def leave_out_wandb_anonymous(logger) -> None:
    """Lightning's WandbLogger passes anonymous=None to wandb.init, and W&B 0.31 warns in every
    run that the setting has no effect: it is left out. Relies on: `WandbLogger._wandb_init`,
    the keyword arguments of its wandb.init call."""
    logger._wandb_init.pop("anonymous", None)


def refused_a_global(error: pickle.UnpicklingError) -> bool:
    """Whether torch.load(weights_only=True) refused a pickled object (anything beyond tensors
    and plain containers) rather than a damaged file: its message names the GLOBAL it met."""
    return "GLOBAL" in str(error)


def is_jit_deprecation(warning: warnings.WarningMessage) -> bool:
    """Whether `warning` is torch's deprecation of torch.jit (torch 2.13 warns on every call of
    trace, script and load), told apart from other deprecations by its text."""
    return issubclass(warning.category, DeprecationWarning) and "torch.jit" in str(warning.message)


# Loggers of the ONNX export that report at INFO, where Hydra sets the root logger: the optimizer
# logs each of its passes, and torch's exporter warns about every torchvision operator it cannot
# register, used or not. The last is a private module of torch's exporter.
ONNX_EXPORT_LOGGERS = {
    "onnxscript": logging.WARNING,
    "onnx_ir": logging.WARNING,
    "torch.onnx._internal.exporter._registration": logging.ERROR,
}


# --- Hydra (hydra-core 1.3.8, omegaconf 2.3) -----------------------------------------------------


def hydra_error_line(error: Exception) -> str:
    """Hydra's report of a bad override or config choice (a CompactHydraException, raised out of
    `hydra.main` when HYDRA_FULL_ERROR is set) in one line: its lines joined, and those of its
    cause, the list after a line ending in ':' by commas. Left out by their text: OmegaConf's
    `full_key:` and `object_type` lines, which repeat the first, and Hydra's `Config search
    path:` listing."""
    cause = error.__cause__
    report = f"{error}\n{cause}" if cause else str(error)
    report = report.split("Config search path:")[0]
    parts = [line.strip().rstrip(".") for line in report.splitlines()]
    parts = [part for part in parts if part and not part.startswith(("full_key:", "object_type"))]
    line, listing = parts[0], False
    for part in parts[1:]:
        if listing:
            line += f", {part}"
        elif line.endswith(":"):
            line, listing = f"{line} {part}", True
        else:
            line += f"; {part[0].lower()}{part[1:]}"
    return line


def listing_config_groups_once() -> None:
    """Hydra's `--help` lists every config group and its options, and makes a deep copy of its
    whole config repository for each such list: over a hundred copies for this project's groups,
    most of the time `train.py --help` takes. This makes one copy serve every list of one
    process, for the same config name and overrides: listing reads the copy, never changes it.

    Relies on: `ConfigLoaderImpl._parse_overrides_and_create_caching_repo(config_name,
    overrides)` of hydra-core 1.3, which `get_group_options` calls for each list."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    make = ConfigLoaderImpl._parse_overrides_and_create_caching_repo
    made: dict = {}

    def once(self, config_name, overrides):
        key = (id(self), config_name, tuple(overrides))
        if key not in made:
            made[key] = make(self, config_name, overrides)
        return made[key]

    ConfigLoaderImpl._parse_overrides_and_create_caching_repo = once  # type: ignore[method-assign]


# --- hydra-optuna-sweeper (1.2.0, optuna 2.10) ---------------------------------------------------


def no_trial_completed(error: Exception) -> bool:
    """Whether `error` is Optuna's when asked for the best trial of a study with none complete,
    which the sweeper asks at the end of a sweep all the same: matched by its text."""
    return isinstance(error, ValueError) and str(error) == "No trials are completed yet."


# --- uvicorn (0.54) ------------------------------------------------------------------------------


def read_deadline_protocol(read_timeout: float, max_header_bytes: int) -> Any:
    """What makes uvicorn's HTTP protocol (httptools where installed, else h11) close a connection
    whose next request's headers have not arrived within `read_timeout` seconds, counted from
    the connection's opening or from the end of its last answer, or that sends more than
    `max_header_bytes` before they are complete. uvicorn has no such deadline: a client that
    sends part of its headers, or nothing, holds its connection for ever. This is uvicorn's
    `http` option, typed there as a class, which uvicorn only calls, once per connection: a
    partial of a module's function, which uvicorn can pickle to the worker processes it spawns.
    Relies on: the protocol's `loop`, `transport`, `connection_made`, `data_received`,
    `on_response_complete` and `cycle` (the request being answered, replaced once the next one's
    headers are read)."""
    return partial(connection_with_read_deadline, read_timeout, max_header_bytes)


def connection_with_read_deadline(read_timeout: float, max_header_bytes: int, **protocol) -> Any:
    return read_deadline_class()(read_timeout, max_header_bytes, **protocol)


@cache
def read_deadline_class() -> type:
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    class ReadDeadline(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
        def __init__(self, read_timeout: float, max_header_bytes: int, **protocol) -> None:
            super().__init__(**protocol)
            self.read_timeout, self.max_header_bytes = read_timeout, max_header_bytes
            self.timing = False

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self.wait_for_headers()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self.wait_for_headers()

        def wait_for_headers(self) -> None:
            self.answered, self.header_bytes = self.cycle, 0
            self.deadline = self.loop.time() + self.read_timeout
            # One timer per connection, not one per request: a busy connection moves its
            # deadline on, and the timer, when it fires, waits for the deadline it finds.
            if not self.timing:
                self.timing = True
                self.loop.call_at(self.deadline, self.close_if_late)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.cycle is self.answered:  # still no complete headers
                self.header_bytes += len(data)
                if self.header_bytes > self.max_header_bytes:
                    self.transport.close()

        def close_if_late(self) -> None:
            self.timing = False
            if self.cycle is not self.answered or self.transport.is_closing():
                return  # its headers have come: the end of its answer sets the next deadline
            if self.loop.time() < self.deadline:
                self.timing = True
                self.loop.call_at(self.deadline, self.close_if_late)
            else:
                self.transport.close()

    return ReadDeadline


# --- LitData (0.2.76) ----------------------------------------------------------------------------


def interruptible_chunk_writing() -> None:
    """Lets Ctrl-C stop LitData's `optimize` as it stops any command: LitData's DataProcessor
    sets a SIGINT handler of its own as it starts, which stops its workers and then ends the
    process with os._exit(0), as if the chunks had all been written. This one stops the workers
    alike and raises KeyboardInterrupt (a worker that the signal reaches ends as it did).
    Relies on: `DataProcessor._signal_handler`, which its `run` sets, and the `stop_queues` and
    `workers` it stops."""
    from litdata.processing.data_processor import DataProcessor

    command = os.getpid()

    def stop_workers(self, signum, frame) -> None:
        if os.getpid() != command:  # a worker, forked with the handler: it ends, as LitData's
            os._exit(0)
        for stop_queue in getattr(self, "stop_queues", []):
            stop_queue.put(None)
        for worker in getattr(self, "workers", []):
            worker.join(0)
        raise KeyboardInterrupt

    DataProcessor._signal_handler = stop_workers


def allow_plain_http_object_storage() -> None:
    """Lets LitData reach an S3-compatible server over plain HTTP (a MinIO or a test server on
    the local network), named by AWS_ENDPOINT_URL. LitData moves chunks with obstore, which
    refuses http:// unless its client is told `allow_http`, and LitData gives it options of its
    own without that one. Relies on: `litdata.streaming.downloader._OBSTORE_CLIENT_OPTIONS`,
    the dict of those options."""
    if not os.environ.get("AWS_ENDPOINT_URL", "").startswith("http://"):
        return
    from litdata.streaming import downloader

    downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = "true"
