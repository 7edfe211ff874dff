"""A Hugging Face transformers backbone, fine-tuned: `python train.py model/net=pretrained
model.net.name=<hub id or folder>` (the `hf` extra: pip install -e ".[hf]").

Safe by construction: weights load from safetensors only, `trust_remote_code` is never set, and
the architecture is a class that transformers itself defines for image or text classification.
The hub is asked only when training starts. The checkpoint records the backbone's class and
configuration (`backbone`) beside its weights, so eval, export and resumed training rebuild it
without the hub or the original folder; that class is a `_target_` which the allowed-targets
rule (configs/allowed_targets.yaml) must permit like any other.

The backbone's own preprocessing is the data contract: its image processor's size, resampling,
rescaling, mean and std, or its tokenizer, replace what the datamodule would fit
(`data_preprocessing`, which builders.py asks before the datamodule is made).
"""

from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from hydra.utils import get_object
from omegaconf import OmegaConf
from torch import nn

from ..console import UserError

# What a hub id's files are fetched with, and how to fetch them beforehand.
FETCH_HINT = "fetch it with network access (hf download {name}) or pass a local folder"
# Weights in any other format are pickles, which could run code when loaded.
PICKLED = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")
# The auto class that builds a new classification head for each input kind.
AUTO_CLASSES = {
    "image": "AutoModelForImageClassification",
    "text": "AutoModelForSequenceClassification",
}
# Recorded per class, not in the configuration: the head's labels are the data contract's.
LABEL_KEYS = ("id2label", "label2id")


def transformers_module():
    try:
        import transformers
    except ModuleNotFoundError:
        raise UserError(
            'model/net=pretrained needs transformers: pip install -e ".[hf]"'
        ) from None
    transformers.logging.set_verbosity_error()  # the load report: a new head is expected
    transformers.utils.logging.disable_progress_bar()
    return transformers


def source(name: str) -> str:
    """A local folder as an absolute path, else the hub id as given."""
    path = Path(name).expanduser()
    if path.is_dir():
        return str(path.absolute())
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise UserError(
            f"model.net.name={name} is not a folder; pass a folder saved with save_pretrained "
            "or a Hugging Face hub id such as google/vit-base-patch16-224-in21k"
        )
    return name


def fetched(load, name: str, what: str):
    """`load()`, with the hub's and the folder's failures as one line each."""
    try:
        return load()
    except OSError as error:
        text = str(error)
        if "couldn't connect" in text or "offline" in text.lower():
            raise UserError(
                f"model.net.name={name}: its {what} is not cached and the hub cannot be "
                f"reached; {FETCH_HINT.format(name=name)}"
            ) from None
        if "safetensors" in text or "pytorch_model.bin" in text:
            raise UserError(refusal(name)) from None
        first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
        raise UserError(f"model.net.name={name}: cannot load its {what}: {first}") from None
    except ValueError as error:  # an architecture that transformers does not define
        first = str(error).strip().splitlines()[0]
        raise UserError(
            f"model.net.name={name} is not an architecture transformers defines ({first}); "
            "code from the model's repository is never run"
        ) from None


def refusal(name: str) -> str:
    return (
        f"model.net.name={name} holds no safetensors weights (only pickled ones, which could "
        "run code when loaded); convert them to model.safetensors or choose another model"
    )


def check_weights(path: str, name: str) -> None:
    folder = Path(path)
    pickled = any(file for pattern in PICKLED for file in folder.glob(pattern))
    if folder.is_dir() and pickled and not any(folder.glob("*.safetensors")):
        raise UserError(refusal(name))


def backbone_config(name: str):
    """The backbone's configuration, of an architecture transformers defines."""
    transformers = transformers_module()
    path = source(name)
    return fetched(
        lambda: transformers.AutoConfig.from_pretrained(path, trust_remote_code=False),
        name,
        "configuration",
    )


def kind_of(config) -> str:
    """Whether the backbone takes images or texts: which classification head transformers has
    for its architecture."""
    from transformers.models.auto import modeling_auto

    if config.model_type in modeling_auto.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES:
        return "image"
    if config.model_type in modeling_auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES:
        return "text"
    raise UserError(
        f"{config.model_type} models have no image or text classifier in transformers; "
        "choose an image backbone (ViT, ConvNeXt, ResNet...) or a text encoder (BERT...)"
    )


class Pretrained(nn.Module):
    """A transformers backbone for images (pixel values) or texts (token ids) with a new head of
    `num_classes` outputs (one for the regressor).

    `name`: a hub id or a folder, read when training starts. `backbone`: the class and
    configuration that the checkpoint records; given, the network is built from them alone and
    its weights come from the checkpoint. `freeze_epochs`: the backbone stays frozen (only the
    head trains) for this many epochs; then it trains at `backbone_lr_scale` times the learning
    rate. `gradient_checkpointing`: recompute activations in the backward pass (less memory for
    large backbones, about a third more compute).
    """

    def __init__(
        self,
        name: str,
        num_classes: int = 1,
        freeze_epochs: int = 1,
        backbone_lr_scale: float = 0.1,
        gradient_checkpointing: bool = False,
        backbone: dict | None = None,
    ):
        super().__init__()
        if not isinstance(freeze_epochs, int) or freeze_epochs < 0:
            raise UserError(f"model.net.freeze_epochs={freeze_epochs} must be 0 or more epochs")
        if not 0 <= backbone_lr_scale <= 1:
            raise UserError(f"model.net.backbone_lr_scale={backbone_lr_scale} must be in 0..1")
        self.freeze_epochs, self.backbone_lr_scale = freeze_epochs, backbone_lr_scale
        self.model = rebuilt(backbone) if backbone else downloaded(name, num_classes)
        if self.model.config.num_labels != num_classes:
            raise UserError(
                f"the recorded backbone has {self.model.config.num_labels} outputs, the model "
                f"{num_classes}: pass a checkpoint that train.py wrote"
            )
        if gradient_checkpointing:
            if not self.model.supports_gradient_checkpointing:
                raise UserError(
                    f"{type(self.model).__name__} does not support gradient checkpointing; "
                    "set model.net.gradient_checkpointing=false"
                )
            self.model.activation_checkpointing_enable()
        self.pad_id = getattr(self.model.config, "pad_token_id", None)

    @property
    def backbone(self) -> nn.Module:
        return self.model.base_model

    @property
    def attention(self) -> tuple[int, int] | None:
        """Heads and width of a transformer backbone, for onnxruntime's transformer optimizer
        (export's onnx_optimized); None for a convolutional one."""
        heads = getattr(self.model.config, "num_attention_heads", None)
        width = getattr(self.model.config, "hidden_size", None)
        return (heads, width) if isinstance(heads, int) and isinstance(width, int) else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.model.main_input_name == "pixel_values":
            return self.model(pixel_values=x).logits
        # Padding is masked out of attention; its id is the tokenizer's (data_preprocessing).
        mask = torch.ones_like(x) if self.pad_id is None else (x != self.pad_id).long()
        return self.model(input_ids=x, attention_mask=mask).logits

    def record(self) -> dict:
        """What the checkpoint keeps to rebuild the network without the hub or the folder."""
        cls = type(self.model)
        config = {k: v for k, v in self.model.config.to_dict().items() if k not in LABEL_KEYS}
        config["num_labels"] = self.model.config.num_labels
        return {"backbone": {"_target_": f"{cls.__module__}.{cls.__qualname__}", "config": config}}

    def param_groups(self) -> list[dict]:
        """The head at the optimizer's learning rate, the backbone at `backbone_lr_scale` of it
        (NetModule.configure_optimizers applies `lr_scale`)."""
        backbone = list(self.backbone.parameters())
        ids = {id(p) for p in backbone}
        head = [p for p in self.parameters() if id(p) not in ids]
        return [{"params": head}, {"params": backbone, "lr_scale": self.backbone_lr_scale}]

    def callbacks(self) -> list[pl.Callback]:
        return [FreezeBackbone(self.freeze_epochs)] if self.freeze_epochs else []

    @staticmethod
    def data_preprocessing(net: Any, kind: str, data: Any) -> dict:
        """The preprocessing settings the backbone was trained with, for the datamodule to use
        instead of fitted ones."""
        if OmegaConf.is_missing(net, "name") or not net.name:
            raise UserError(
                "model/net=pretrained needs model.net.name=<hub id or folder>, e.g. "
                "google/vit-base-patch16-224-in21k or distilbert-base-uncased"
            )
        config = backbone_config(net.name)
        if kind_of(config) != kind:
            raise UserError(
                f"model.net.name={net.name} is a backbone for {kind_of(config)} inputs "
                f"({config.model_type}), but the data holds {kind} inputs; choose one for {kind}"
            )
        if kind == "image":
            return image_preprocessing(net.name, config)
        return text_preprocessing(net.name, config, data.max_length)


def downloaded(name: str, num_classes: int) -> nn.Module:
    """The backbone's weights (safetensors only) under a new head of `num_classes` outputs."""
    transformers = transformers_module()
    config = backbone_config(name)
    path = source(name)
    check_weights(path, name)
    auto = getattr(transformers, AUTO_CLASSES[kind_of(config)])
    model = fetched(
        lambda: auto.from_pretrained(
            path,
            num_labels=num_classes,
            ignore_mismatched_sizes=True,  # a head for other classes is replaced
            use_safetensors=True,
            trust_remote_code=False,
        ),
        name,
        "weights",
    )
    return model.train()  # from_pretrained leaves it in eval mode, which Lightning keeps


def rebuilt(backbone: dict) -> nn.Module:
    """The recorded class, from its recorded configuration, with fresh weights. The checkpoint's
    targets were allowed before anything was built (checkpoints.check_targets)."""
    transformers = transformers_module()
    cls = get_object(backbone["_target_"])
    if not (isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel)):
        raise UserError(f"{backbone['_target_']} is not a transformers model class")
    return cls(cls.config_class.from_dict(dict(backbone["config"])))


def image_preprocessing(name: str, config) -> dict:
    """The image processor's settings as the image kind's: resized (the whole image, to a
    square of the processor's size) with its resampling, scaled, normalized with its mean and
    std."""
    from PIL import Image
    from transformers import AutoImageProcessor

    path = source(name)
    processor = fetched(lambda: AutoImageProcessor.from_pretrained(path), name, "image processor")
    size = dict(processor.size.items()) if hasattr(processor.size, "items") else processor.size
    side = size.get("height") or size.get("shortest_edge")
    if not side or (size.get("width") and size["width"] != side):
        raise UserError(f"model.net.name={name}: its image processor's size {size} is not square")
    channels = config.num_channels
    scale = processor.rescale_factor if processor.do_rescale else 1.0
    mean, std = [0.0] * channels, [1.0] * channels
    if processor.do_normalize:
        mean, std = list(processor.image_mean), list(processor.image_std)
    return {
        "channels": channels,
        "image_size": int(side),
        "value_range": [0.0, 255 * scale],
        "mean": [float(value) for value in mean],
        "std": [float(value) for value in std],
        "resampling": Image.Resampling(int(processor.resample)).name.lower(),
    }


def text_preprocessing(name: str, config, max_length: int) -> dict:
    """The backbone's own tokenizer, cutting and padding to `max_length` tokens (at most its
    positions), as the text kind applies it with tokenizers alone."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    path = source(name)
    tokenizer = fetched(lambda: AutoTokenizer.from_pretrained(path), name, "tokenizer")
    if not tokenizer.is_fast or tokenizer.pad_token_id is None:
        raise UserError(
            f"model.net.name={name}: its tokenizer has no tokenizer.json with a padding token; "
            "choose a model with a fast tokenizer"
        )
    # Without its files, transformers builds the architecture's tokenizer with no vocabulary:
    # every word would be the unknown token, and training would learn from none of them.
    if len(tokenizer) <= len(set(tokenizer.all_special_ids)):
        raise UserError(
            f"model.net.name={name}: its tokenizer has no vocabulary (no tokenizer.json or "
            "vocabulary file beside the model); save it there with tokenizer.save_pretrained"
        )
    embeddings = getattr(config, "vocab_size", None)
    if embeddings is not None and len(tokenizer) > embeddings:
        raise UserError(
            f"model.net.name={name}: its tokenizer has {len(tokenizer)} tokens and the model "
            f"embeds {embeddings}; save the tokenizer the model was trained with beside it"
        )
    pad_id = getattr(config, "pad_token_id", None)
    if pad_id is not None and pad_id != tokenizer.pad_token_id:
        raise UserError(
            f"model.net.name={name}: its tokenizer pads with id {tokenizer.pad_token_id}, its "
            f"configuration masks id {pad_id}"
        )
    length = min(max_length, getattr(config, "max_position_embeddings", max_length))
    backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    backend.enable_truncation(length)
    backend.enable_padding(
        pad_id=tokenizer.pad_token_id, pad_token=tokenizer.pad_token, length=length
    )
    return {
        "tokenizer": backend.to_str(),
        "vocab_size": backend.get_vocab_size(),
        "max_length": length,
        "lowercase": bool(getattr(tokenizer, "do_lower_case", False)),
    }


class FreezeBackbone(pl.Callback):
    """Keeps the backbone frozen for the first `epochs` epochs, so that the new head learns
    before its gradients reach the pretrained weights. The backbone is in the optimizer from the
    start (at its own learning rate, under the same schedule); frozen, it has no gradients, which
    the optimizer skips. By epoch, so a resumed run freezes as the first one did."""

    def __init__(self, epochs: int):
        self.epochs = epochs

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        pl_module.net.backbone.requires_grad_(trainer.current_epoch >= self.epochs)

    # A run resumed inside an epoch starts without on_train_epoch_start.
    on_train_start = on_train_epoch_start
