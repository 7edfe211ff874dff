"""Predict: the classes of raw samples, images or folders of images, with onnxruntime, no torch."""

from pathlib import Path

from ..console import UserError, format_table
from ..files import save_json
from ..inference import classify, load_export, read_inputs


def table_row(prediction: dict) -> list[str]:
    file, index = prediction["file"], prediction["index"]
    source = file if index is None else f"{file}[{index}]"
    return [source, prediction["class"], f"{prediction['probability']:.4f}"]


def predict(cfg) -> list[dict]:
    """Classifies every sample of `cfg.input`, prints a table and writes predictions.json."""
    if not cfg.get("model_path") or not cfg.get("input"):
        raise UserError("predict needs model=<export dir> and input=<.npy file, image or folder>")
    session, manifest = load_export(Path(cfg.model_path))
    raw, sources = read_inputs(Path(cfg.input), manifest["input"])
    predictions = [
        source | result
        for source, result in zip(sources, classify(session, manifest, raw), strict=True)
    ]
    print(format_table(["input", "class", "probability"], [table_row(p) for p in predictions]))
    output = Path(cfg.output_dir) / "predictions.json"
    save_json(output, {"model": str(cfg.model_path), "predictions": predictions})
    return predictions
