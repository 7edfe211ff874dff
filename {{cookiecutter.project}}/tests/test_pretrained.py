"""model/net=pretrained: Hugging Face backbones fine-tuned from a folder, offline. The backbones
are tiny ones built from transformers configs (a ViT, a BERT-like encoder with a tokenizer
trained on the test's texts, a ConvNeXt) and saved with save_pretrained, as a user's would be."""

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from conftest import (
    ALLOWED,
    FAST_LATENCY,
    compose_config,
    error_lines,
    made_once,
    read_checkpoint,
    run_cli,
    sentences,
    without_torch,
    write_texts,
)
from runtimes import OTHER_RUNTIMES
from servers import Server, Upload, call

from {{ cookiecutter.package }}.builders import build_datamodule, build_model, build_trained
from {{ cookiecutter.package }}.console import UserError
from {{ cookiecutter.package }}.onnx_session import open_session, run

BACKBONE = "model/net=pretrained"
# Red and blue images of several sizes: a backbone's new head tells them apart in a few steps.
COLOURS = {"blue": (30, 40, 200), "red": (200, 30, 40)}
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def write_images(root: Path, per_class: int = 12) -> Path:
    from PIL import Image

    generator = np.random.default_rng(0)
    for name, colour in COLOURS.items():
        (root / name).mkdir(parents=True)
        for index in range(per_class):
            height, width = 30 + index, 44 - index
            noise = generator.integers(0, 60, (height, width, 3))
            pixels = np.clip(noise + colour, 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / name / f"{index:02}.png")
    return root


def save_vit(folder: Path) -> Path:
    config = transformers.ViTConfig(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=32,
        patch_size=8,
    )
    transformers.ViTModel(config).save_pretrained(folder)
    transformers.ViTImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


def save_convnext(folder: Path) -> Path:
    config = transformers.ConvNextConfig(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2)
    transformers.ConvNextModel(config).save_pretrained(folder)
    processor = transformers.ConvNextImageProcessorPil(size={"shortest_edge": 32})
    processor.save_pretrained(folder)
    return folder


def save_bert(folder: Path) -> Path:
    """A BERT-like encoder with a WordPiece tokenizer trained on the test's texts."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=120, special_tokens=SPECIAL_TOKENS, show_progress=False
    )
    tokenizer.train_from_iterator([text for text, _ in sentences(200, seed=1)], trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    names = ("pad_token", "unk_token", "cls_token", "sep_token", "mask_token")
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, **dict(zip(names, SPECIAL_TOKENS, strict=True))
    )
    config = transformers.BertConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        pad_token_id=0,
    )
    transformers.BertModel(config).save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def data(tmp_path_factory) -> dict[str, Path]:
    def write(folder: Path) -> None:
        write_images(folder / "images")
        write_texts(folder / "texts")
        save_vit(folder / "vit")
        save_bert(folder / "bert")

    folder = made_once(tmp_path_factory, "pretrained_data", write)
    return {name: folder / name for name in ("images", "texts", "vit", "bert")}


def image_overrides(data: dict[str, Path], *more: str) -> list[str]:
    return ["data=images", f"data.root={data['images']}", "data.batch_size=8", BACKBONE, *more]


def train_then_delete(folder: Path, source: Path, overrides: list[str], formats: str) -> None:
    """Trains from a copy of the backbone saved in `source`, deletes the copy, then exports the
    best checkpoint: nothing after training may read the backbone's files."""
    from {{ cookiecutter.package }}.tasks.export import export
    from {{ cookiecutter.package }}.tasks.train import train

    backbone = shutil.copytree(source, folder / "backbone")
    train(compose_config("train", folder / "run", [*overrides, f"model.net.name={backbone}"]))
    shutil.rmtree(backbone)
    best = folder / "run" / "checkpoints" / "best.ckpt"
    settings = [f"ckpt_path={best}", f"formats={formats}", *FAST_LATENCY]
    export(compose_config("export", folder / "export", settings, quiet=False))


@pytest.fixture(scope="session")
def vit_run(data, tmp_path_factory) -> Path:
    """A ViT fine-tuned on the images for two epochs (the first with the backbone frozen), its
    backbone's folder deleted, then exported in every format."""
    overrides = image_overrides(data, "trainer.max_epochs=3")
    formats = "[onnx,onnx_int8,onnx_optimized,torchscript,torch_export]"
    return made_once(
        tmp_path_factory,
        "pretrained_vit",
        lambda folder: train_then_delete(folder, data["vit"], overrides, formats),
    )


@pytest.fixture(scope="session")
def bert_run(data, tmp_path_factory) -> Path:
    overrides = [
        "data=text",
        f"data.root={data['texts']}",
        "data.max_length=16",
        "data.batch_size=16",
        "trainer.max_epochs=4",
        "model.optimizer.lr=0.01",
        BACKBONE,
    ]
    return made_once(
        tmp_path_factory,
        "pretrained_bert",
        lambda folder: train_then_delete(
            folder, data["bert"], overrides, "[onnx,onnx_int8,onnx_optimized]"
        ),
    )


def test_an_image_backbone_fine_tunes_and_its_checkpoint_stands_alone(vit_run, tmp_path):
    from {{ cookiecutter.package }}.tasks.eval import evaluate

    assert not (vit_run / "backbone").exists()
    best = vit_run / "run" / "checkpoints" / "best.ckpt"
    checkpoint = read_checkpoint(best)
    net = checkpoint["config"]["model"]["net"]
    assert net["backbone"]["_target_"] == (
        "transformers.models.vit.modeling_vit.ViTForImageClassification"
    )
    assert net["backbone"]["config"]["num_labels"] == len(COLOURS)
    # The image processor's settings, not statistics fitted on the images (which are no 0.5).
    preprocessing = checkpoint["config"]["contract"]["preprocessing"]
    assert preprocessing == {
        "channels": 3,
        "image_size": 32,
        "value_range": [0.0, 1.0],
        "mean": [0.5, 0.5, 0.5],
        "std": [0.5, 0.5, 0.5],
        "resampling": "bilinear",
    }
    trained = json.loads((vit_run / "run" / "metrics.json").read_text())
    evaluate(compose_config("eval", tmp_path, [f"ckpt_path={best}"]))
    evaluated = json.loads((tmp_path / "metrics.json").read_text())
    assert evaluated["test/acc"] == pytest.approx(trained["test/acc"]), (evaluated, trained)


def test_the_backbone_is_frozen_then_trains_at_a_fraction_of_the_learning_rate(data, tmp_path):
    import pytorch_lightning as pl

    cfg = compose_config(
        "train",
        tmp_path,
        image_overrides(
            data,
            f"model.net.name={data['vit']}",
            "model.net.backbone_lr_scale=0.25",
            "model.scheduler=null",
            "trainer.max_epochs=2",
            "+trainer.limit_train_batches=2",
            "+trainer.limit_val_batches=1",
        ),
    )
    datamodule = build_datamodule(cfg)
    model = build_model(cfg, datamodule)
    start = {name: p.detach().clone() for name, p in model.net.named_parameters()}
    seen = []

    class Watch(pl.Callback):
        def on_train_epoch_end(self, trainer, module):
            changed = {
                name: not torch.equal(p, start[name]) for name, p in module.net.named_parameters()
            }
            backbone = {f"model.{module.net.model.base_model_prefix}.{n}" for n, _ in
                        module.net.backbone.named_parameters()}  # fmt: skip
            seen.append(
                {
                    "backbone": any(changed[name] for name in backbone),
                    "head": any(v for name, v in changed.items() if name not in backbone),
                    "lrs": [group["lr"] for group in trainer.optimizers[0].param_groups],
                }
            )

    trainer = pl.Trainer(
        max_epochs=2,
        limit_train_batches=2,
        limit_val_batches=1,
        callbacks=[Watch()],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, datamodule=datamodule)
    lr = cfg.model.optimizer.lr
    assert seen == [
        {"backbone": False, "head": True, "lrs": [lr, 0.25 * lr]},  # only the head learns
        {"backbone": True, "head": True, "lrs": [lr, 0.25 * lr]},
    ]


# The resume writes to a run folder of its own, where Lightning starts the checkpoint
# callback's records afresh and says so.
@pytest.mark.filterwarnings("ignore:The dirpath has changed from")
def test_training_resumes_without_the_backbone_s_folder(data, tmp_path):
    from {{ cookiecutter.package }}.tasks.train import train

    backbone = shutil.copytree(data["vit"], tmp_path / "backbone")
    overrides = image_overrides(
        data,
        f"model.net.name={backbone}",
        "model.scheduler=null",  # a cosine to zero at the first run's last epoch would stay there
        "+trainer.limit_train_batches=2",
        "+trainer.limit_val_batches=1",
        "test=false",
    )
    train(compose_config("train", tmp_path / "first", [*overrides, "trainer.max_epochs=1"]))
    shutil.rmtree(backbone)
    last = tmp_path / "first" / "checkpoints" / "last.ckpt"
    resumed = [*overrides, "trainer.max_epochs=2", f"ckpt_path={last}"]
    train(compose_config("train", tmp_path / "resumed", resumed))
    before = read_checkpoint(last)
    after = read_checkpoint(tmp_path / "resumed" / "checkpoints" / "last.ckpt")
    assert after["epoch"] == 1
    assert after["config"]["model"]["net"] == before["config"]["model"]["net"]
    assert after["config"]["contract"] == before["config"]["contract"]
    name = "net.model.vit.embeddings.patch_embeddings.projection.weight"
    assert not torch.equal(before["state_dict"][name], after["state_dict"][name])  # unfrozen


def test_bf16_and_gradient_checkpointing_train(data, tmp_path):
    from {{ cookiecutter.package }}.tasks.train import train

    overrides = image_overrides(
        data,
        f"model.net.name={data['vit']}",
        "trainer.precision=bf16-mixed",
        "model.net.gradient_checkpointing=true",
        "model.net.freeze_epochs=0",
        "trainer.max_epochs=1",
        "+trainer.limit_train_batches=2",
        "+trainer.limit_val_batches=1",
        "test=false",
    )
    train(compose_config("train", tmp_path, overrides))
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert np.isfinite(metrics["val/loss"])


def test_every_export_format_of_an_image_backbone_passes(vit_run):
    report = json.loads((vit_run / "export" / "report.json").read_text())
    assert report["passed"], report["failures"]
    results = report["results"]
    assert set(results) >= {"onnx", "onnx_int8", "onnx_optimized", "torchscript", "torch_export"}
    fusion = results["onnx_optimized"]["optimization"]
    assert fusion["optimizer"] == "transformer"
    assert fusion["fused_operators"]
    assert fusion["fused_patterns"]["LayerNormalization"] > 0
    manifest = json.loads((vit_run / "export" / "manifest.json").read_text())
    assert manifest["input"]["shape"] == ["batch", 3, 32, 32]


def test_predict_and_serve_prepare_images_as_the_image_processor_and_training_do(
    vit_run, data, tmp_path
):
    from PIL import Image

    from {{ cookiecutter.package }}.kinds import image

    export = vit_run / "export"
    manifest = json.loads((export / "manifest.json").read_text())
    preprocessing = image.Preprocessing.model_validate(manifest["preprocessing"])
    files = sorted((data["images"] / "red").glob("*.png"))[:4]
    ours = np.stack([image.encode(file, preprocessing) for file in files])
    processor = transformers.AutoImageProcessor.from_pretrained(data["vit"])
    theirs = processor([Image.open(f).convert("RGB") for f in files], return_tensors="np")
    # The same resize filter on the same 8-bit image; theirs rounds once more after resizing.
    np.testing.assert_allclose(ours, theirs["pixel_values"], atol=2 / 255 / 0.5)

    model, datamodule = build_trained(str(vit_run / "run" / "checkpoints" / "best.ckpt"), ALLOWED)
    datamodule.setup()
    dataset = datamodule.splits["test"].unaugmented()
    inputs = torch.stack([dataset[index][0] for index in range(len(dataset))])
    served = image.from_files(dataset.files, preprocessing)
    np.testing.assert_array_equal(served, inputs.numpy())  # bit for bit as in training
    with torch.inference_mode():
        eager = [datamodule.contract.target.class_names[i] for i in model(inputs).argmax(-1)]

    result = run_cli(
        "predict.py",
        f"model={export}",
        f"input={data['images']}",
        f"hydra.run.dir={tmp_path / 'predict'}",
        env=without_torch(tmp_path / "blocker"),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    predictions = json.loads((tmp_path / "predict" / "predictions.json").read_text())
    by_file = {p["file"]: p["class"] for p in predictions["predictions"]}
    assert [by_file[str(file)] for file in dataset.files] == eager

    (tmp_path / "server").mkdir()
    with Server(export, tmp_path / "server") as server:
        upload = Upload(dataset.files[0].read_bytes(), name="a.png")
        answer = call("POST", f"{server.url}/predict", data=upload)
        assert answer.status == 200, answer.text
        assert answer.json()["predictions"][0]["class"] == eager[0]


def test_a_text_backbone_fine_tunes_with_its_own_tokenizer(bert_run, data, tmp_path):
    from tokenizers import Tokenizer

    from {{ cookiecutter.package }}.kinds import text

    report = json.loads((bert_run / "export" / "report.json").read_text())
    assert report["passed"], report["failures"]
    fusion = report["results"]["onnx_optimized"]["optimization"]
    # onnxruntime's optimizer fuses GELU and LayerNorm of the exported encoder (its attention
    # patterns do not match the graphs of torch's dynamo exporter).
    assert fusion["optimizer"] == "transformer"
    assert fusion["fused_patterns"]["Gelu"] > 0 and fusion["fused_patterns"]["LayerNormalization"]
    # INT8 of the same graph, whose position table is sliced to the text's tokens: quantized
    # dynamically, checked on texts cut shorter too, and judged by the test metric (passed).
    int8 = report["results"]["onnx_int8"]
    assert int8["quantization"]["method"] == "dynamic"
    assert set(int8["parity_shorter"]) == {"tokens=8", "tokens=1"}
    manifest = json.loads((bert_run / "export" / "manifest.json").read_text())
    assert (bert_run / "export" / manifest["formats"]["onnx_int8"]["file"]).is_file()
    preprocessing = text.Preprocessing.model_validate(manifest["preprocessing"])
    # The backbone's tokenizer, written into the export: [CLS] ... [SEP], padded with [PAD].
    written = Tokenizer.from_file(str(bert_run / "export" / "tokenizer.json"))
    assert written.to_str() == preprocessing.tokenizer
    texts = [sentence for sentence, _ in sentences(6, seed=7)] + ["Moon " * 40]
    ids = text.encode(texts, preprocessing)
    # As transformers' own tokenizer of the backbone prepares them.
    tokenizer = transformers.AutoTokenizer.from_pretrained(data["bert"])
    theirs = tokenizer(texts, padding="max_length", truncation=True, max_length=16)
    np.testing.assert_array_equal(ids, theirs["input_ids"])
    # Each file's entry names the runtimes that run it, and leaves out onnx's reference
    # evaluator where it cannot: it fails on this encoder's GatherElements over its positions.
    for entry in manifest["formats"].values():
        path = bert_run / "export" / entry["file"]
        expected = run(open_session(path), ids)
        for runtime, runner in OTHER_RUNTIMES.items():
            if runtime in entry["runtimes"]:
                outputs = runner(path)(ids)
                tolerance = np.abs(expected).max() / 4 if entry["variant"] == "int8" else 1e-4
                assert np.abs(outputs - expected).max() <= tolerance, (entry["file"], runtime)
            elif runtime == "onnx.reference":
                # An operator it lacks (the optimized file's), or the case it mishandles.
                with pytest.raises((NotImplementedError, ValueError)):
                    runner(path)(ids)
    model, _ = build_trained(str(bert_run / "run" / "checkpoints" / "best.ckpt"), ALLOWED)
    with torch.inference_mode():
        eager = model(torch.from_numpy(ids)).argmax(-1).tolist()
    class_names = manifest["target"]["class_names"]

    (tmp_path / "texts.jsonl").write_text("\n".join(json.dumps({"text": t}) for t in texts))
    result = run_cli(
        "predict.py",
        f"model={bert_run / 'export'}",
        f"input={tmp_path / 'texts.jsonl'}",
        f"hydra.run.dir={tmp_path / 'predict'}",
        env=without_torch(tmp_path / "blocker"),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    predictions = json.loads((tmp_path / "predict" / "predictions.json").read_text())
    assert [p["class"] for p in predictions["predictions"]] == [class_names[i] for i in eager]


def test_the_checkpoint_s_architecture_must_be_allowed(vit_run):
    best = str(vit_run / "run" / "checkpoints" / "best.ckpt")
    allowed = [name for name in ALLOWED if name != "transformers.models.vit"]
    with pytest.raises(UserError, match="model.net.backbone._target_ is .* add its module to "
                       "allowed_targets in configs/allowed_targets.yaml"):  # fmt: skip
        build_trained(best, allowed)


def test_a_convolutional_backbone_fine_tunes_and_exports(data, tmp_path):
    overrides = image_overrides(data, "trainer.max_epochs=1", "test=false")
    backbone = save_convnext(tmp_path / "convnext")
    train_then_delete(tmp_path, backbone, overrides, "[onnx,onnx_optimized]")
    report = json.loads((tmp_path / "export" / "report.json").read_text())
    assert report["passed"], report["failures"]
    assert report["results"]["onnx_optimized"]["optimization"]["optimizer"] == "level_all"
    checkpoint = read_checkpoint(tmp_path / "run" / "checkpoints" / "best.ckpt")
    assert checkpoint["config"]["contract"]["preprocessing"]["resampling"] == "bicubic"


def test_pickled_weights_are_refused(data, tmp_path):
    # A folder as older tools saved models: the configuration, and the weights as a pickle.
    folder = tmp_path / "pickled"
    model = transformers.ViTModel.from_pretrained(data["vit"])
    model.config.save_pretrained(folder)
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    shutil.copy(data["vit"] / "preprocessor_config.json", folder)
    cfg = compose_config(
        "train", tmp_path / "run", image_overrides(data, f"model.net.name={folder}")
    )
    datamodule = build_datamodule(cfg)
    with pytest.raises(UserError, match="holds no safetensors weights") as refused:
        build_model(cfg, datamodule)
    assert "\n" not in str(refused.value)


MODEL_FILES = ("config.json", "model.safetensors")


def without_tokenizer(bert: Path, folder: Path) -> None:
    # transformers would build the architecture's tokenizer with its special tokens only.
    for name in MODEL_FILES:
        shutil.copy(bert / name, folder)


def with_fewer_embeddings(bert: Path, folder: Path) -> None:
    # The tokenizer's ids would run past the model's embeddings at the first step.
    config = transformers.BertConfig.from_pretrained(bert)
    config.vocab_size = len(SPECIAL_TOKENS) + 10
    transformers.BertModel(config).save_pretrained(folder)
    for file in bert.iterdir():
        if file.name not in MODEL_FILES:
            shutil.copy(file, folder)


@pytest.mark.parametrize(
    ("write", "line"),
    [
        (without_tokenizer, "its tokenizer has no vocabulary"),
        (with_fewer_embeddings, r"its tokenizer has \d+ tokens and the model embeds 15"),
    ],
)
def test_a_text_backbone_without_its_own_tokenizer_is_refused(write, line, data, tmp_path):
    folder = tmp_path / "backbone"
    folder.mkdir()
    write(data["bert"], folder)
    overrides = ["data=text", f"data.root={data['texts']}", BACKBONE, f"model.net.name={folder}"]
    with pytest.raises(UserError, match=line) as refused:
        build_datamodule(compose_config("train", tmp_path / "run", overrides))
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        (["data=images"], "model/net=pretrained needs model.net.name=<hub id or folder>"),
        (["data=images", "model.net.name=./nowhere"], "model.net.name=./nowhere is not a folder"),
        (["data=digits", "model.net.name=VIT"], "cannot apply; use data=images or data=text"),
        (["data=text", "model.net.name=VIT"], "for image inputs (vit), but the data holds text"),
    ],
)
def test_a_backbone_that_cannot_serve_is_one_line(overrides, line, data, tmp_path):
    roots = {"data=images": data["images"], "data=text": data["texts"]}
    folder = [f"data.root={roots[overrides[0]]}"] if overrides[0] in roots else []
    named = [o.replace("VIT", str(data["vit"])) for o in overrides]
    cfg = compose_config("train", tmp_path, [BACKBONE, *named, *folder])
    with pytest.raises(UserError, match=re.escape(line)) as refused:
        build_datamodule(cfg)
    assert "\n" not in str(refused.value)


@pytest.mark.slow  # train.py as a process
def test_an_uncached_hub_id_offline_is_one_line(data, tmp_path):
    result = run_cli(
        "train.py",
        *image_overrides(data, "model.net.name=google/vit-base-patch16-224-in21k"),
        f"hydra.run.dir={tmp_path / 'run'}",
        env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")},
    )
    assert result.returncode == 1
    assert error_lines(result) == [
        "error: model.net.name=google/vit-base-patch16-224-in21k: its configuration is not "
        "cached and the hub cannot be reached; fetch it with network access (hf download "
        "google/vit-base-patch16-224-in21k) or pass a local folder"
    ]
