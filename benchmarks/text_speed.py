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
    ONNX_VARIANTS,
    PACKAGE,
    add_arguments,
    against_handwritten,
    export_latency,
    median,
    project_env,
    python,
    report,
    run,
    setup,
)

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
        epochs = against_handwritten(project, data, args.epochs, args.rounds, scratch)
        results = export_latency(project, data, 3, 200, scratch)

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
    for variant, name in {"eager": "eager", **ONNX_VARIANTS}.items():
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
