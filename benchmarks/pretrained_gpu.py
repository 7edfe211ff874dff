"""Pretrained backbones on a GPU: fine-tunes a base-size ViT (ViT-B/16 at 224 x 224, random
weights saved with save_pretrained) through the project's own Classifier and Trainer in bf16
mixed precision, and reports samples per second and peak GPU memory.

    python benchmarks/pretrained_gpu.py [--batch-size 64] [--steps 60] [--checkpointing]
                                        [--project DIR]

The images are synthetic PNG files (two classes) in a temporary folder, read by the images
datamodule as a user's would be. The first 10 steps (compilation of kernels, allocator warm-up)
are left out of the rate. `--accelerator cpu` runs the same script on a CPU, for checking it.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import PACKAGE, render_default, report

WARMUP = 10
MEASURE = """
import json, sys, time
from pathlib import Path
import pytorch_lightning as pl
import torch
from hydra import compose, initialize_config_dir
from {package}.builders import build_datamodule, build_model

result, accelerator, steps, overrides = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
with initialize_config_dir(str(Path.cwd() / "configs"), version_base="1.3"):
    cfg = compose("train", overrides=overrides)
datamodule = build_datamodule(cfg)
model = build_model(cfg, datamodule)


class Rate(pl.Callback):
    def __init__(self):
        self.times, self.samples = [], 0

    def on_train_batch_end(self, trainer, module, outputs, batch, index):
        if accelerator == "gpu":
            torch.cuda.synchronize()
        self.times.append(time.perf_counter())
        if len(self.times) > {warmup}:
            self.samples += len(batch[1])


rate = Rate()
trainer = pl.Trainer(
    accelerator=accelerator, devices=1, precision="bf16-mixed", max_steps=steps,
    limit_val_batches=0, logger=False, enable_checkpointing=False, enable_progress_bar=False,
    enable_model_summary=False, callbacks=[rate],
)
if accelerator == "gpu":
    torch.cuda.reset_peak_memory_stats()
trainer.fit(model, datamodule=datamodule)
seconds = rate.times[-1] - rate.times[{warmup}]
peak = torch.cuda.max_memory_allocated() if accelerator == "gpu" else None
Path(result).write_text(json.dumps({{
    "samples_per_s": rate.samples / seconds,
    "steps": len(rate.times),
    "peak_memory_gib": peak / 2**30 if peak else None,
    "device": torch.cuda.get_device_name() if accelerator == "gpu" else "cpu",
    "parameters": sum(p.numel() for p in model.parameters()),
}}))
"""
BACKBONE = """
import sys
import numpy as np
import transformers
from pathlib import Path
from PIL import Image
folder, images, count = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
transformers.ViTModel(transformers.ViTConfig()).save_pretrained(folder)
transformers.ViTImageProcessorPil(size={"height": 224, "width": 224}).save_pretrained(folder)
generator = np.random.default_rng(0)
for label, colour in enumerate([(200, 40, 40), (40, 40, 200)]):
    (images / str(label)).mkdir(parents=True)
    for index in range(count // 2):
        noise = generator.integers(0, 60, (256, 256, 3))
        Image.fromarray(np.clip(noise + colour, 0, 255).astype(np.uint8)).save(
            images / str(label) / f"{index}.png")
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", help="an existing default render to use")
    parser.add_argument("--accelerator", default="gpu", choices=["gpu", "cpu"])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=60, help="training steps, warm-up included")
    parser.add_argument("--checkpointing", action="store_true", help="gradient checkpointing")
    parser.add_argument("--images", type=int, default=1024, help="synthetic images to write")
    parser.add_argument("--workers", type=int, default=8, help="DataLoader workers")
    args = parser.parse_args()
    project = render_default(args.project)
    env = {**os.environ, "PYTHONPATH": str(project / "src"), "PYTHONWARNINGS": "ignore"}
    with tempfile.TemporaryDirectory(prefix="bench-pretrained-gpu-") as scratch:
        scratch = Path(scratch)
        backbone, images = scratch / "vit", scratch / "images"
        command = [sys.executable, "-c", BACKBONE, str(backbone), str(images), str(args.images)]
        subprocess.run(command, cwd=project, env=env, check=True)
        overrides = [
            "data=images",
            f"data.root={images}",
            f"data.cache_dir={scratch / 'cache'}",  # its default needs Hydra's runtime
            f"data.batch_size={args.batch_size}",
            f"data.num_workers={args.workers}",
            "model/net=pretrained",
            f"model.net.name={backbone}",
            "model.net.freeze_epochs=0",
            f"model.net.gradient_checkpointing={str(args.checkpointing).lower()}",
        ]
        result = scratch / "result.json"
        code = MEASURE.format(package=PACKAGE, warmup=WARMUP)
        command = [sys.executable, "-c", code, str(result), args.accelerator, str(args.steps)]
        subprocess.run([*command, *overrides], cwd=project, env=env, check=True)
        measured = json.loads(result.read_text())
    memory = measured["peak_memory_gib"]
    rows = [
        [
            f"ViT-B/16 ({measured['parameters'] / 1e6:.0f} M), bf16-mixed",
            measured["device"],
            args.batch_size,
            "on" if args.checkpointing else "off",
            f"{measured['samples_per_s']:.1f}",
            f"{memory:.2f}" if memory else "-",
        ]
    ]
    headers = ["backbone", "device", "batch", "checkpointing", "samples/s", "peak GiB"]
    report("pretrained_gpu", "Fine-tuning a base-size ViT", headers, rows, measured)


if __name__ == "__main__":
    main()
