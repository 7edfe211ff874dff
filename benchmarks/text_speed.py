"""Texts (data=text) on the example quotations: tokenization without torch, the exported ONNX
variants against eager PyTorch, and training against a hand-written loop, side by side.

    python benchmarks/text_speed.py [--epochs 8] [--rounds 3] [--threads 1] [--project DIR]

Writes the example texts (scripts/example_texts.py) and measures, in one run:

- tokenization: kinds/text.py encoding every quotation with the fitted tokenizer, in a process
  that imports no torch (as predict and serve run it): texts and megabytes per second;
- training: seconds per epoch of `train.py data=text` (the bag of tokens, default callbacks and
  logger, progress bar off) against a hand-written PyTorch loop over the same network, the same
  token ids and batches of the same size (baselines.py `handwritten`), `--rounds` interleaved
  pairs, each run's epochs without the first and the last;
- inference: export.py's own latency of eager PyTorch and of model.onnx, model.int8.onnx and
  model.optimized.onnx at batch 1 and 64 (the median of its repeats, in one process), with the
  speed-up over eager.
"""

import argparse
import json
import tempfile
from pathlib import Path

from common import (
    PACKAGE,
    PROJECT,
    add_arguments,
    median,
    project_env,
    python,
    report,
    run,
    run_baseline,
    setup,
    steady_epoch,
    train_with_probe,
)

VARIANTS = {"fp32": "onnx", "int8": "onnx_int8", "optimized": "onnx_optimized"}
TOKENIZE = """
import json, sys, time
from pathlib import Path
import pandas as pd
from {package}.kinds import text
texts = list(pd.read_csv(sys.argv[1])["quote"])
fitted = text.fit(texts, "quote", 20000, 128)
start, rounds = time.perf_counter(), 0
while time.perf_counter() - start < 2 or rounds < 3:
    text.encode(texts, fitted)
    rounds += 1
seconds = (time.perf_counter() - start) / rounds
megabytes = sum(len(t.encode()) for t in texts) / 1e6
assert "torch" not in sys.modules, "tokenizing imported torch"
Path(sys.argv[2]).write_text(json.dumps({{"texts_per_s": len(texts) / seconds,
                                         "mb_per_s": megabytes / seconds}}))
"""


def tokenization(project: Path, quotes: Path, scratch: Path) -> dict:
    result = scratch / "tokenize.json"
    code = TOKENIZE.format(package=PACKAGE)
    run(python("-c", code, str(quotes), str(result)), project, project_env(project))
    return json.loads(result.read_text())


def training(project: Path, data: list[str], epochs: int, rounds: int, scratch: Path) -> dict:
    """Seconds per epoch of the project and of the hand-written loop, interleaved."""
    seconds: dict[str, list[float]] = {"project": [], "hand-written loop": []}
    for index in range(rounds):
        folder = Path(tempfile.mkdtemp(dir=scratch))
        times = train_with_probe(
            project, [*PROJECT, *data], epochs, folder / "run", "EpochTimer", folder / "p.json"
        )
        seconds["project"].append(steady_epoch(times))
        hand = folder / "hand.json"
        run_baseline(project, "handwritten", str(epochs), str(hand), str(folder), *data)
        seconds["hand-written loop"].append(steady_epoch(json.loads(hand.read_text())))
        print(f"round {index + 1}: {seconds['project'][-1]:.3f} s against "
              f"{seconds['hand-written loop'][-1]:.3f} s per epoch", flush=True)  # fmt: skip
    return seconds


def inference(project: Path, data: list[str], scratch: Path) -> dict:
    """export.py's latency table of the ONNX variants of a briefly trained bag of tokens."""
    run_dir, export_dir = scratch / "train", scratch / "export"
    overrides = [*PROJECT, *data, "trainer.max_epochs=3", "test=false", f"hydra.run.dir={run_dir}"]
    run(python("train.py", *overrides), project, project_env(project))
    best = run_dir / "checkpoints" / "best.ckpt"
    formats = "formats=[" + ",".join(VARIANTS.values()) + "]"
    command = ["export.py", f"ckpt_path={best}", formats, "latency.repeats=200"]
    run(python(*command, f"hydra.run.dir={export_dir}"), project, project_env(project))
    return json.loads((export_dir / "report.json").read_text())["results"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8, help="epochs per training run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved training pairs")
    add_arguments(parser)
    args = parser.parse_args()
    project = setup(args)
    with tempfile.TemporaryDirectory(prefix="bench-text-") as scratch:
        scratch = Path(scratch)
        run(python("scripts/example_texts.py", str(scratch / "texts")), project)
        quotes = scratch / "texts" / "quotes.csv"
        data = ["data=text", f"data.path={quotes}", "data.text=quote", "data.target=topic"]
        tokens = tokenization(project, quotes, scratch)
        epochs = training(project, data, args.epochs, args.rounds, scratch)
        results = inference(project, data, scratch)

    rows = [
        [
            "tokenize (no torch)",
            f"{tokens['texts_per_s']:,.0f} texts/s",
            f"{tokens['mb_per_s']:.1f} MB/s",
            "",
        ]
    ]
    loop = median(epochs["hand-written loop"])
    for name, values in epochs.items():
        rows.append(
            [
                f"train: {name}",
                f"{median(values):.3f} s/epoch",
                f"{median(values) / loop:.2f}x",
                "",
            ]
        )
    eager = results["eager"]["latency_ms"]
    for variant, name in {"eager": "eager", **VARIANTS}.items():
        latency = results[name]["latency_ms"]
        rows.append([f"inference: {variant}", *(
            f"{latency[size]:.3f} ms ({eager[size] / latency[size]:.1f}x)" for size in ("1", "64")
        ), f"{results[name]['metric']}"])  # fmt: skip
    report(
        "text_speed",
        "Texts: tokenization, training against a hand-written loop, inference by ONNX variant",
        ["what", "batch 1 / rate", "batch 64 / ratio", "test metric"],
        rows,
        {"tokenization": tokens, "epoch_seconds": epochs, "export": results},
    )


if __name__ == "__main__":
    main()
