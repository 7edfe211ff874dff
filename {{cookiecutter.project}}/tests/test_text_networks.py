"""Both text networks (the bag of tokens and the transformer) train on texts and export every
format with a dynamic batch and a dynamic number of tokens, each checked against PyTorch at
full length and cut shorter; padding changes no answer, in PyTorch and in onnxruntime; the
transformer's attention fuses, padding mask and all."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import ALLOWED, FAST_LATENCY, compose_config, made_once, write_texts

from {{ cookiecutter.package }}.builders import build_trained
from {{ cookiecutter.package }}.inference import load_export
from {{ cookiecutter.package }}.onnx_session import VARIANTS, run

FORMATS = ["onnx", "torchscript", "torch_export", "onnx_int8", "onnx_optimized"]
# The texts' longest, in tokens: conftest's sentences are nine (eight words and a full stop).
MAX_LENGTH = 16
NETS = {
    "bag": [],
    "transformer": [
        "model/net=transformer",
        "model.net.dim=16",
        "model.net.depth=1",
        "model.net.heads=2",
    ],
}


@pytest.fixture(scope="session", params=list(NETS))
def text_net_export(request, tmp_path_factory) -> tuple[str, Path]:
    """Each text network, trained for two epochs on a folder of texts and exported in every
    format: (its name, the run's folder, with `run/` and `export/`)."""
    from {{ cookiecutter.package }}.tasks.export import export
    from {{ cookiecutter.package }}.tasks.train import train

    net = request.param

    def train_and_export(folder: Path) -> None:
        data = ["data=text", f"data.root={write_texts(folder / 'texts')}"]
        settings = [f"data.max_length={MAX_LENGTH}", "data.batch_size=16", "trainer.max_epochs=2"]
        train(compose_config("train", folder / "run", [*data, *settings, *NETS[net]]))
        best = folder / "run" / "checkpoints" / "best.ckpt"
        # A dozen test texts, so one answer is 8 points: this checks the formats, and INT8's
        # metric check is test_export_variants.py's.
        overrides = [
            f"ckpt_path={best}",
            f"formats=[{','.join(FORMATS)}]",
            "max_metric_drop=10",
            *FAST_LATENCY,
        ]
        export(compose_config("export", folder / "export", overrides, quiet=False))

    return net, made_once(tmp_path_factory, f"text_{net}", train_and_export)


def test_each_text_network_exports_every_format_checked_at_two_lengths(text_net_export):
    net, folder = text_net_export
    report = json.loads((folder / "export" / "report.json").read_text())
    assert report["passed"], report["failures"]
    for name in FORMATS:
        result = report["results"][name]
        # Parity with PyTorch at the full length, and on the same texts cut to 8 and 1 tokens.
        assert set(result["parity_shorter"]) == {f"tokens={MAX_LENGTH // 2}", "tokens=1"}
        checks = [*result["parity"].values(), *result["parity_shorter"].values()]
        if name != "onnx_int8":  # judged by the test metric instead, which report["passed"] holds
            assert all(check["max_abs_diff"] <= report["atol"] for check in checks), name
    manifest = json.loads((folder / "export" / "manifest.json").read_text())
    assert manifest["input"]["shape"] == ["batch", "tokens"]
    assert manifest["preprocessing"]["max_length"] == MAX_LENGTH
    assert sorted(manifest["formats"]) == sorted(FORMATS)
    for variant in VARIANTS:  # predict's and serve's checks of manifest and file agree
        session, _ = load_export(folder / "export", variant=variant)
        assert session.get_inputs()[0].shape == ["batch", "tokens"]
    fusion = report["results"]["onnx_optimized"]["optimization"]
    if net == "transformer":
        # One block: its attention, mask included, is one onnxruntime Attention operator.
        assert fusion["optimizer"] == "transformer"
        assert fusion["fused_patterns"] == {"Attention": 1, "LayerNormalization": 3, "Gelu": 1}
        assert fusion["not_fused"] == {}


def test_more_padding_changes_no_output_in_pytorch_or_onnxruntime(text_net_export):
    net, folder = text_net_export
    model, datamodule = build_trained(folder / "run" / "checkpoints" / "best.ckpt", ALLOWED)
    datamodule.setup("test")
    ids, _ = next(iter(datamodule.test_dataloader()))
    longest = int((ids != 0).sum(1).max())
    assert longest < MAX_LENGTH and not ids[:, longest:].any()  # padded at the end
    short, padded = ids[:, :longest], ids  # the same texts, padded to max_length
    with torch.inference_mode():
        network = model.net.eval()
        assert torch.allclose(network(short), network(padded), atol=1e-5), net
    for variant in ("fp32", "optimized"):  # the optimized file: the fused attention's mask
        session, _ = load_export(folder / "export", variant=variant)
        outputs = [run(session, x.numpy()) for x in (short, padded)]
        assert np.allclose(*outputs, atol=1e-5), (net, variant)
        # A text gets the same logits alone (cut to its own length) as in a padded batch.
        alone = ids[:1, : int((ids[0] != 0).sum())].numpy()
        assert np.allclose(run(session, alone), outputs[1][:1], atol=1e-5), (net, variant)
