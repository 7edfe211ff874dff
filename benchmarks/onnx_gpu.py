"""The default project's model.onnx on onnxruntime's CUDA provider against eager PyTorch and
torch.compile on the same GPU, at batch 1 and 256, side by side in one run.

    python benchmarks/onnx_gpu.py [--epochs 2] [--repeats 200]   # a CUDA GPU and onnxruntime-gpu
    python benchmarks/onnx_gpu.py --dry-run                     # the same code on the CPU

Renders the default project, trains it and exports model.onnx with its own train.py and
export.py, then times the three in one process started inside the project: each call takes a
float32 batch on the host and returns logits on the host, so that onnxruntime's copies count as
eager's do; the median of `--repeats` calls after warm-up (torch.compile compiles during it).
Results go to results/onnx_gpu.json (onnx_gpu_dry_run.json).
"""

import argparse
import importlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from common import PACKAGE, add_arguments, project_env, python, report, run, setup
from omegaconf import OmegaConf

BATCHES = (1, 256)


def measure(checkpoint: str, model: str, repeats: int, dry_run: bool) -> dict:
    """{batch: {runtime: ms}}; run inside the project, with its package importable."""
    builders = importlib.import_module(f"{PACKAGE}.builders")
    # How export.py times every format: the median of `repeats` calls after warm-up (and the
    # spread of the timings, which this table leaves out).
    latency = importlib.import_module(f"{PACKAGE}.export.verify").latency
    allowed = OmegaConf.load("configs/allowed_targets.yaml").allowed_targets
    device = "cpu" if dry_run else "cuda"
    net = builders.build_trained(checkpoint, list(allowed))[0].net.eval().to(device)
    compiled = torch.compile(net)
    provider = "CPUExecutionProvider" if dry_run else "CUDAExecutionProvider"
    session = ort.InferenceSession(model, providers=[provider])
    if session.get_providers()[0] != provider:
        sys.exit(f"error: onnxruntime has no {provider}: pip install onnxruntime-gpu")

    def on_torch(module):
        def call(inputs):
            with torch.inference_mode():
                return module(torch.from_numpy(inputs).to(device)).cpu().numpy()

        return call

    runtimes = {
        "eager": on_torch(net),
        "torch.compile": on_torch(compiled),
        "onnxruntime": lambda inputs: session.run(None, {"input": inputs})[0],
    }
    shape = session.get_inputs()[0].shape[1:]
    results = {}
    for batch in BATCHES:
        inputs = np.random.default_rng(0).standard_normal([batch, *shape], np.float32)
        results[batch] = {
            name: latency(call, inputs, warmup=10, repeats=repeats)[0]
            for name, call in runtimes.items()
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--epochs", type=int, default=2, help="training epochs before export")
    parser.add_argument("--repeats", type=int, default=200, help="timed calls per cell")
    parser.add_argument("--dry-run", action="store_true", help="the CPU instead of a CUDA GPU")
    parser.add_argument("--measure", nargs=2, help=argparse.SUPPRESS)  # checkpoint, model.onnx
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(*args.measure, args.repeats, args.dry_run)))
        return
    project = setup(args)
    env = project_env(project)
    accelerator = "trainer=cpu" if args.dry_run else "trainer=gpu"
    with tempfile.TemporaryDirectory(prefix="bench-onnx-gpu-") as scratch:
        train_dir, export_dir = Path(scratch) / "train", Path(scratch) / "export"
        train = ["train.py", accelerator, f"trainer.max_epochs={args.epochs}", "logger=csv"]
        run(python(*train, f"hydra.run.dir={train_dir}"), project, env)
        checkpoint = train_dir / "checkpoints" / "best.ckpt"
        export = ["export.py", f"ckpt_path={checkpoint}", "formats=[onnx]"]
        run(python(*export, f"hydra.run.dir={export_dir}"), project, env)
        measuring = [__file__, "--measure", str(checkpoint), str(export_dir / "model.onnx")]
        measuring += ["--repeats", str(args.repeats), *(["--dry-run"] if args.dry_run else [])]
        # In the project, where configs/allowed_targets.yaml is; a process without the others.
        result = subprocess.run(
            python(*measuring), cwd=project, env=env, capture_output=True, text=True, check=True
        )
        times = json.loads(result.stdout.splitlines()[-1])
    rows = []
    for batch, cells in times.items():
        row = [int(batch), cells["eager"]]
        for name in ("torch.compile", "onnxruntime"):
            row += [cells[name], cells["eager"] / cells[name]]
        rows.append(row)
    device = "CPU (dry run)" if args.dry_run else "GPU"
    report(
        "onnx_gpu_dry_run" if args.dry_run else "onnx_gpu",
        f"model.onnx on {device}: median ms of {args.repeats} calls, host to host",
        ["batch", "eager ms", "torch.compile ms", "x eager", "onnxruntime ms", "x eager"],
        rows,
        {"times_ms": times, "epochs": args.epochs, "repeats": args.repeats},
    )


if __name__ == "__main__":
    main()
