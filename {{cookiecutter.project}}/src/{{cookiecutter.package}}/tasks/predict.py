"""Predict: the classes of raw samples, images or folders of images, with onnxruntime, no torch."""

from pathlib import Path

from ..console import UserError, format_table
from ..files import save_json
from ..inference import classify, load_export, non_finite, read_inputs

INVALID = {"error", "mark"}


def source_name(source: dict) -> str:
    return source["file"] if source["index"] is None else f"{source['file']}[{source['index']}]"


def table_row(prediction: dict) -> list[str]:
    if "invalid" in prediction:
        return [source_name(prediction), "-", prediction["invalid"]]
    return [source_name(prediction), prediction["class"], f"{prediction['probability']:.4f}"]


def predict(cfg) -> list[dict]:
    """Classifies every sample of `cfg.input`, prints a table and writes predictions.json."""
    if not cfg.get("model_path") or not cfg.get("input"):
        raise UserError("predict needs model=<export dir> and input=<.npy file, image or folder>")
    if cfg.invalid_inputs not in INVALID:
        raise UserError(f"invalid_inputs={cfg.invalid_inputs!r}: choose error or mark")
    output = Path(cfg.output_dir) / "predictions.json"
    if Path(cfg.output_dir).is_file():
        raise UserError(
            f"output_dir={cfg.output_dir} is a file; pass a folder for predictions.json"
        )
    session, manifest = load_export(Path(cfg.model_path))
    raw, sources = read_inputs(Path(cfg.input), manifest["input"])
    invalid = non_finite(raw)
    if invalid.any() and cfg.invalid_inputs == "error":
        names = [source_name(source) for source, bad in zip(sources, invalid, strict=True) if bad]
        raise UserError(
            f"{len(names)} samples hold NaN or infinite values ({', '.join(names[:3])}"
            f"{', ...' if len(names) > 3 else ''}); fix them, or pass invalid_inputs=mark to "
            "predict the others"
        )
    results = iter(classify(session, manifest, raw[~invalid]))
    predictions = [
        source | ({"invalid": "NaN or infinite values"} if bad else next(results))
        for source, bad in zip(sources, invalid, strict=True)
    ]
    print(format_table(["input", "class", "probability"], [table_row(p) for p in predictions]))
    save_json(output, {"model": str(cfg.model_path), "predictions": predictions})
    return predictions
