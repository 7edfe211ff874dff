"""optimize.py and data=stream: the data that configs/train.yaml names written as LitData chunks
to a folder and to an S3-compatible server on this machine (moto), trained from under DDP and
after a kill -9 mid-epoch, and the checkpoints evaluated, exported and served from raw inputs."""

import json
import os
import shutil
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import boto3
import pytest
import torch.distributed as dist
from conftest import (
    FAST_LATENCY,
    QUIET,
    ROOT,
    compose_config,
    default_datamodule,
    finish,
    optimized,
    run_predict,
    start_cli,
    write_inputs,
    write_texts,
)
from probes import digest
from servers import free_port

from {{ cookiecutter.package }}.checkpoints import load_checkpoint
from {{ cookiecutter.package }}.console import UserError
from {{ cookiecutter.package }}.tasks.optimize import optimize

PROBES = {"PYTHONPATH": f"{ROOT / 'src'}:{ROOT / 'tests'}"}
# One epoch of a small stream, whose few batches a stream's logging interval is not lowered to
# (a rank's share is known only in the processes Lightning starts): log every step.
ONE_EPOCH = ["trainer.max_epochs=1", "trainer.log_every_n_steps=1"]


@pytest.fixture
def s3(tmp_path):
    """An S3-compatible server on a free local port, with a bucket `data`; the environment that
    points boto3 and LitData at it, as users point them at theirs."""
    port = free_port()
    server = subprocess.Popen(
        ["moto_server", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    env = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        client = boto3.client("s3")
        for _ in range(100):
            try:
                client.create_bucket(Bucket="data")
                break
            except Exception:  # the server is still starting
                time.sleep(0.1)
        yield env
    finally:
        server.terminate()
        server.wait()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def split_size(stream: Path, split: str) -> int:
    """How many samples optimize.py wrote of a split, by LitData's index of its chunks."""
    chunks = json.loads((stream / split / "index.json").read_text())["chunks"]
    return sum(chunk["chunk_size"] for chunk in chunks)


def seen(probe: Path, rank: int = 0) -> list[dict]:
    """What BatchDigests wrote of each training batch of a rank, in order."""
    return [json.loads(line) for line in (probe / f"rank{rank}.jsonl").read_text().splitlines()]


def train_digests(datamodule) -> Counter:
    """How often each input occurs in the training split, by digest."""
    dataset = datamodule.splits["train"]
    if hasattr(dataset, "unaugmented"):
        dataset = dataset.unaugmented()
    return Counter(digest(dataset[index][0]) for index in range(len(dataset)))


def stream_run(stream: str, run_dir: Path, probe: Path, *overrides: str, env=None, **options):
    """`python train.py data=stream` from `stream`, with BatchDigests writing to `probe`."""
    return start_cli(
        "train.py",
        *QUIET,
        "data=stream",
        f"data.input_dir={stream}",
        "+callbacks.probe._target_=probes.BatchDigests",
        f"+callbacks.probe.dirpath={probe}",
        f"hydra.run.dir={run_dir}",
        *overrides,
        env={**PROBES, **(env or {})},
        **options,
    )


@pytest.mark.slow
def test_a_run_killed_mid_epoch_resumes_at_the_sample_it_reached(stream, tmp_path):
    # last.ckpt every 3 steps as well, as a long epoch would save it by time.
    # About ten batches an epoch, whatever the data's size.
    batch_size = max(1, split_size(stream, "train") // 10)
    overrides = [
        "trainer.max_epochs=2",
        f"data.batch_size={batch_size}",
        # A worker process too, whose position in the split the loader's state holds.
        "data.num_workers=1",
        "test=false",
        "seed=5",
        "trainer.deterministic=true",
        "+callbacks.last_checkpoint.every_n_train_steps=3",
    ]
    whole = finish(stream_run(stream, tmp_path / "whole", tmp_path / "seen_whole", *overrides))
    assert whole.returncode == 0, whole.stderr[-3000:]
    expected = seen(tmp_path / "seen_whole")
    per_epoch = sum(1 for line in expected if line["epoch"] == 0)

    run_dir, probe = tmp_path / "killed", tmp_path / "seen_killed"
    last = run_dir / "checkpoints" / "last.ckpt"
    # Each batch slowed down by the probe, so that the run is stopped inside an epoch.
    overrides.append("+callbacks.probe.pause=0.03")
    with stream_run(
        stream, run_dir, probe, *overrides, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    ) as process:
        # last.ckpt is replaced atomically, so it can be read while the run goes on.
        while process.poll() is None and not (
            last.is_file()
            and (step := load_checkpoint(last)["global_step"]) > per_epoch
            and step % per_epoch
        ):
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
    assert process.returncode == -signal.SIGKILL
    reached = load_checkpoint(last)["global_step"]
    assert reached % per_epoch and not (run_dir / "metrics.json").exists()

    resumed = finish(stream_run(stream, run_dir, probe, *overrides))  # the same command
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (
        f"Restoring states from the checkpoint path at {last}" in resumed.stdout + resumed.stderr
    )
    # What the killed run saw before its checkpoint, then what the resumed run saw, is what the
    # uninterrupted run saw, batch by batch: it went on from the sample it had reached.
    lines = seen(probe)
    resumed_part = lines[len(lines) - (len(expected) - reached) :]
    killed_part = [
        line for line in lines[: len(lines) - len(resumed_part)] if line["step"] < reached
    ]
    assert resumed_part[0]["step"] == reached
    assert killed_part + resumed_part == expected
    metrics = [
        json.loads((path / "metrics.json").read_text()) for path in (tmp_path / "whole", run_dir)
    ]
    for run in metrics:
        run.pop("best_model_path")
    assert metrics[0] == metrics[1]


@pytest.mark.slow
def test_ddp_trains_from_object_storage_each_sample_once_an_epoch(stream, s3, tmp_path, score):
    from {{ cookiecutter.package }}.tasks.eval import evaluate

    url = optimized(tmp_path / "optimize", "s3://data/stream")
    cache, probe, run_dir = tmp_path / "cache", tmp_path / "seen", tmp_path / "run"
    # Two batches at least of the validation and test splits, one for each process.
    batch_size = min(32, *(split_size(stream, split) // 2 for split in ("val", "test")))
    result = finish(
        stream_run(
            url,
            run_dir,
            probe,
            "trainer=ddp_cpu",
            "trainer.max_epochs=2",
            f"data.batch_size={batch_size}",
            f"data.cache_dir={cache}",
            "data.max_cache_size=1GB",
            env=s3,
        )
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # The chunks came from the server, through the cache.
    assert list(cache.rglob("chunk-*.bin"))

    # Each epoch the two ranks read disjoint shares of the training split, each sample once;
    # LitData leaves out what would make one rank's share longer than the other's.
    train = train_digests(default_datamodule(tmp_path / "data"))
    ranks = [seen(probe, rank) for rank in (0, 1)]
    orders = []
    for epoch in (0, 1):
        shares = [
            [d for line in rank if line["epoch"] == epoch for d in line["samples"]]
            for rank in ranks
        ]
        together = Counter(shares[0]) + Counter(shares[1])
        assert not together - train  # nothing more often than the split holds it
        assert len(shares[0]) == len(shares[1])
        assert sum(train.values()) - together.total() < 2 * batch_size
        orders.append(shares[0])
    assert orders[0] != orders[1]  # shuffled again each epoch

    # Tested under DDP on the stream's test split, each sample once: as one process evaluates
    # the same checkpoint.
    metrics = json.loads((run_dir / "metrics.json").read_text())
    best = f"ckpt_path={metrics['best_model_path']}"
    single = evaluate(compose_config("eval", tmp_path / "eval", [best]))
    # An R² sums floats in another order under DDP: equal up to rounding.
    assert single[f"test/{score}"] == pytest.approx(metrics[f"test/{score}"], abs=1e-6)


def test_a_streams_checkpoint_exports_and_predicts_from_raw_inputs(stream, tmp_path):
    from {{ cookiecutter.package }}.tasks.export import export
    from {{ cookiecutter.package }}.tasks.train import train

    overrides = ["data=stream", f"data.input_dir={stream}", *ONE_EPOCH, "test=false"]
    train(compose_config("train", tmp_path / "run", overrides))
    best = tmp_path / "run" / "checkpoints" / "best.ckpt"
    overrides = [f"ckpt_path={best}", "formats=[onnx]"]
    export(compose_config("export", tmp_path / "export", overrides, quiet=False))
    manifest = json.loads((tmp_path / "export" / "manifest.json").read_text())
    datamodule = default_datamodule(tmp_path / "data")
    assert manifest["preprocessing"] == datamodule.contract.to_dict()["preprocessing"]
    inputs, labels = write_inputs(datamodule, tmp_path / "inputs")
    predictions = run_predict(tmp_path / "export", inputs, tmp_path / "predict")
    assert len(predictions) == len(labels)


def test_a_stream_of_texts_sizes_the_text_network_by_its_tokenizer(tmp_path):
    from {{ cookiecutter.package }}.builders import build_datamodule, build_model
    from {{ cookiecutter.package }}.tasks.export import export
    from {{ cookiecutter.package }}.tasks.train import train

    texts = ["data=text", f"data.root={write_texts(tmp_path / 'texts')}", "data.max_length=16"]
    stream = tmp_path / "stream"
    optimize(compose_config("optimize", tmp_path, [*texts, f"output_dir={stream}"], quiet=False))
    overrides = ["data=stream", f"data.input_dir={stream}", "model=classifier", "test=false"]
    cfg = compose_config("train", tmp_path / "run", [*overrides, *ONE_EPOCH])
    train(cfg)
    contract = json.loads((stream / "contract.json").read_text())
    assert cfg.model.net.vocab_size == contract["preprocessing"]["vocab_size"]
    # The transformer reads the texts' length in tokens too.
    transformer = compose_config("train", tmp_path / "t", [*overrides, "model/net=transformer"])
    build_model(transformer, build_datamodule(transformer))
    assert transformer.model.net.max_length == 16
    # Rebuilt from its checkpoint, with the settings it recorded.
    best = f"ckpt_path={tmp_path / 'run' / 'checkpoints' / 'best.ckpt'}"
    overrides = [best, "formats=[onnx]", *FAST_LATENCY]
    assert export(compose_config("export", tmp_path / "export", overrides, quiet=False))["passed"]


def test_bad_streams_and_destinations_are_refused_in_one_line(stream, task, tmp_path):
    from {{ cookiecutter.package }}.builders import build_datamodule, build_model

    def refusal(name: str, *overrides: str) -> str:
        task = optimize if name == "optimize" else build_datamodule
        with pytest.raises(UserError) as error:
            task(compose_config(name, tmp_path / "run", overrides, quiet=name != "optimize"))
        return str(error.value)

    assert "pass output_dir=" in refusal("optimize")
    assert "e.g. 64MB" in refusal("optimize", f"output_dir={tmp_path / 'new'}", "chunk_bytes=64")
    # null or a number: the number's own line.
    line = "num_workers=0 must be a whole number of at least 1"
    assert refusal("optimize", f"output_dir={tmp_path / 'new'}", "num_workers=0") == line
    before = {path: path.stat().st_mtime_ns for path in stream.rglob("*")}
    assert "already holds files" in refusal("optimize", f"output_dir={stream}")
    data = next(path for path in stream.rglob("*") if path.is_file())
    line = f"output_dir={data} is a file; choose a folder for the chunks"  # not "remove them"
    assert refusal("optimize", f"output_dir={data}") == line
    assert {path: path.stat().st_mtime_ns for path in stream.rglob("*")} == before
    assert "needs data.input_dir" in refusal("train", "data=stream")
    # LitData would read it only once a loader starts, with a traceback.
    line = "data.max_cache_size=lots must be a size with its unit, as LitData reads it: e.g. 64MB"
    overrides = ["data=stream", f"data.input_dir={stream}", "data.max_cache_size=lots"]
    assert refusal("train", *overrides) == line
    # A URL mistyped, not a local folder to create.
    for url in ("s3:/bucket/stream", "gs://bucket/stream"):
        line = "streams live in a local folder or at s3://bucket/prefix"
        assert line in refusal("optimize", f"output_dir={url}")
        assert line in refusal("train", "data=stream", f"data.input_dir={url}")
    assert not (Path.cwd() / "s3:").exists()
    (tmp_path / "unfinished" / "train").mkdir(parents=True)  # as an image folder may have
    message = refusal("train", "data=stream", f"data.input_dir={tmp_path / 'unfinished'}")
    assert "holds no contract.json: it is not a stream; write one with python optimize.py" in (
        message
    )
    # Chunks without a contract: optimize.py stopped, and the folder is for removing.
    shutil.copy(next((stream / "train").glob("chunk-*.bin")), tmp_path / "unfinished" / "train")
    stopped = "is a stream that optimize.py did not finish (no contract.json): remove it"
    assert stopped in refusal("train", "data=stream", f"data.input_dir={tmp_path / 'unfinished'}")
    stopped = "holds a stream that optimize.py did not finish (no contract.json): remove it"
    assert stopped in refusal("optimize", f"output_dir={tmp_path / 'unfinished'}")
    split = stream / "train"  # the whole stream, not one of its splits
    line = f"{split} is one split of the stream in {stream}: pass data.input_dir={stream}"
    assert refusal("train", "data=stream", f"data.input_dir={split}") == line
    (tmp_path / "unfinished" / "contract.json").write_text('{"input": ')
    message = refusal("train", "data=stream", f"data.input_dir={tmp_path / 'unfinished'}")
    assert "contract.json is not JSON" in message
    # A model of the other task: the stream took its data.task from optimize.py.
    other = {"classification": "regressor", "regression": "classifier"}[task]
    overrides = ["data=stream", f"data.input_dir={stream}", f"model={other}"]
    cfg = compose_config("train", tmp_path / "run", overrides)
    with pytest.raises(UserError, match=r"target: pass .*; a stream's data.task is optimize.py's"):
        build_model(cfg, build_datamodule(cfg))

    # Under DDP (one process here, in a real gloo group), a split too small for a batch each.
    overrides = ["data=stream", f"data.input_dir={stream}", "data.batch_size=100000"]
    datamodule = build_datamodule(compose_config("train", tmp_path / "run", overrides))
    address = f"tcp://127.0.0.1:{free_port()}"
    dist.init_process_group("gloo", init_method=address, rank=0, world_size=1)
    try:
        with pytest.raises(UserError, match="lower data.batch_size, or train on fewer processes"):
            datamodule.val_dataloader()
    finally:
        dist.destroy_process_group()
