"""Pretrained backbones (model/net=pretrained): seconds per step of fine-tuning a small BERT-like
encoder against a hand-written loop over the same transformers model and data, and the export's
latency by ONNX variant, side by side.

    python benchmarks/pretrained.py [--epochs 5] [--rounds 3] [--threads 1] [--project DIR]

Writes the example texts (scripts/example_texts.py), trains a WordPiece tokenizer on them and
saves a small BERT-like encoder (random weights; 4 layers of width 128) with save_pretrained, then
measures, in one run:

- training: seconds per step of `train.py data=text model/net=pretrained` (the backbone trained
  from the first epoch at the head's learning rate, so that both do the same work) against the
  hand-written loop of baselines.py over the same network, token ids and batch size, `--rounds`
  interleaved pairs, each run's epochs without the first and the last;
- inference: export.py's own latency of eager PyTorch and of model.onnx, model.int8.onnx and
  model.optimized.onnx at batch 1 and 64, with the speed-up over eager;
- a base-size ViT (ViT-B/16, 224 x 224, random weights) on this machine: seconds per training
  step at batch 8 in a plain loop, for what the README says to expect on a CPU.
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

from common import (
    ONNX_VARIANTS,
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

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
BACKBONE = """
import sys
import pandas as pd
import transformers
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
texts, folder = list(pd.read_csv(sys.argv[1])["quote"]), sys.argv[2]
special = {special}
tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
trainer = trainers.WordPieceTrainer(vocab_size=4000, special_tokens=special, show_progress=False)
tokenizer.train_from_iterator(texts, trainer)
tokenizer.post_processor = processors.TemplateProcessing(
    single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
names = ("pad_token", "unk_token", "cls_token", "sep_token", "mask_token")
fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, **dict(zip(names, special)))
config = transformers.BertConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=128,
    num_hidden_layers=4, num_attention_heads=4, intermediate_size=512,
    max_position_embeddings=128, pad_token_id=0)
transformers.BertModel(config).save_pretrained(folder)
fast.save_pretrained(folder)
"""
BASE_VIT = """
import json, sys, time
import torch, transformers
torch.manual_seed(0)
model = transformers.ViTForImageClassification(transformers.ViTConfig(num_labels=10))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
x, y = torch.randn(8, 3, 224, 224), torch.randint(0, 10, (8,))
times = []
for _ in range(4):
    start = time.perf_counter()
    loss = torch.nn.functional.cross_entropy(model(pixel_values=x).logits, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    times.append(time.perf_counter() - start)
parameters = sum(p.numel() for p in model.parameters())
json.dump({"step_s": sorted(times[1:])[1], "parameters": parameters}, open(sys.argv[1], "w"))
"""


def steps_per_epoch(project: Path, data: list[str], scratch: Path) -> int:
    """Training batches per epoch, from the datamodule as train.py sets it up."""
    code = (
        "import math, sys\n"
        "from pathlib import Path\n"
        "from baselines import prepared_data, project_config\n"
        "cfg = project_config(1, sys.argv[2:])\n"
        "batches = math.ceil(len(prepared_data(cfg).splits['train']) / cfg.data.batch_size)\n"
        "Path(sys.argv[1]).write_text(str(batches))\n"
    )
    result = scratch / "steps.txt"
    run(python("-c", code, str(result), *data), project, project_env(project))
    return int(result.read_text())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5, help="epochs per training run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved training pairs")
    add_arguments(parser)
    args = parser.parse_args()
    project = setup(args)
    with tempfile.TemporaryDirectory(prefix="bench-pretrained-") as scratch:
        scratch = Path(scratch)
        run(python("scripts/example_texts.py", str(scratch / "texts")), project)
        quotes, backbone = scratch / "texts" / "quotes.csv", scratch / "backbone"
        code = BACKBONE.format(special=SPECIAL_TOKENS)
        run(python("-c", code, str(quotes), str(backbone)), project, project_env(project))
        data = [
            "data=text",
            f"data.path={quotes}",
            "data.text=quote",
            "data.target=topic",
            "data.max_length=64",
            "model/net=pretrained",
            f"model.net.name={backbone}",
            "model.net.freeze_epochs=0",
            "model.net.backbone_lr_scale=1.0",
        ]
        steps = steps_per_epoch(project, data, scratch)
        epochs = against_handwritten(project, data, args.epochs, args.rounds, scratch)
        results = export_latency(project, data, 2, 100, scratch)
        start = time.perf_counter()
        run(python("-c", BASE_VIT, str(scratch / "vit.json")), project, project_env(project))
        base = json.loads((scratch / "vit.json").read_text())
        print(f"base-size ViT: {time.perf_counter() - start:.0f} s", flush=True)

    loop = median(epochs["hand-written loop"])
    rows = [
        [f"train: {name}", f"{median(values) / steps:.3f} s/step", f"{median(values) / loop:.2f}x"]
        for name, values in epochs.items()
    ]
    eager = results["eager"]["latency_ms"]
    for variant, name in {"eager": "eager", **ONNX_VARIANTS}.items():
        latency = results[name]["latency_ms"]
        rows.append([f"inference: {variant}", *(
            f"{latency[size]:.3f} ms ({eager[size] / latency[size]:.1f}x)" for size in ("1", "64")
        )])  # fmt: skip
    rows.append(
        [
            f"ViT-B/16 ({base['parameters'] / 1e6:.0f} M), batch 8",
            f"{base['step_s']:.2f} s/step",
            "",
        ]
    )
    report(
        "pretrained",
        "Pretrained backbones: fine-tuning against a hand-written loop, inference by ONNX variant",
        ["what", "step / batch 1", "ratio / batch 64"],
        rows,
        {"steps_per_epoch": steps, "epoch_seconds": epochs, "export": results, "vit_base": base},
    )


if __name__ == "__main__":
    main()
