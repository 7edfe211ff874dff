"""Predict: classes or values of raw samples, image files or table rows, with onnxruntime and
without torch."""

from pathlib import Path

from ..console import UserError, format_table, show
from ..files import save_json
from ..inference import check_top_k, load_export, non_finite, predictions, read_inputs

INVALID = {"error", "mark"}


def source_name(source: dict) -> str:
    return source["file"] if source["index"] is None else f"{source['file']}[{source['index']}]"


def table_rows(prediction: dict) -> list[list[str]]:
    """One row per sample; with top_k > 1 one per listed class, the sample named on the first."""
    name = source_name(prediction)
    if "invalid" in prediction:
        return [[name, "-", prediction["invalid"]]]
    if "value" in prediction:
        return [[name, f"{prediction['value']:.6g}"]]
    return [
        [name if rank == 0 else "", entry["class"], f"{entry['probability']:.4f}"]
        for rank, entry in enumerate(prediction.get("top", [prediction]))
    ]


def check_options(cfg) -> None:
    if not cfg.get("model_path") or not cfg.get("input"):
        raise UserError(
            "predict needs model=<export dir> and input=<.npy, .csv or .parquet file, image or "
            "folder>"
        )
    if cfg.invalid_inputs not in INVALID:
        raise UserError(f"invalid_inputs={cfg.invalid_inputs!r}: choose error or mark")
    check_top_k(cfg.top_k)
    if Path(cfg.output_dir).is_file():
        raise UserError(
            f"output_dir={cfg.output_dir} is a file; pass a folder for predictions.json"
        )


def predict(cfg) -> list[dict]:
    """Predicts every sample of `cfg.input`, prints a table and writes predictions.json."""
    check_options(cfg)
    session, manifest = load_export(Path(cfg.model_path), variant=cfg.variant)
    inputs, sources = read_inputs(Path(cfg.input), manifest)
    invalid = non_finite(inputs)
    if invalid.any() and cfg.invalid_inputs == "error":
        names = [source_name(source) for source, bad in zip(sources, invalid, strict=True) if bad]
        raise UserError(
            f"{len(names)} samples hold NaN or infinite values ({', '.join(names[:3])}"
            f"{', ...' if len(names) > 3 else ''}); fix them, or pass invalid_inputs=mark to "
            "predict the others"
        )
    results = iter(predictions(session, manifest, inputs[~invalid], cfg.top_k))
    predicted = [
        source | ({"invalid": "NaN or infinite values"} if bad else next(results))
        for source, bad in zip(sources, invalid, strict=True)
    ]
    columns = ["value"] if manifest["task"] == "regression" else ["class", "probability"]
    show(format_table(["input", *columns], [row for p in predicted for row in table_rows(p)]))
    output = {
        "model": str(cfg.model_path),
        "variant": cfg.variant,
        "task": manifest["task"],
        "predictions": predicted,
    }
    save_json(Path(cfg.output_dir) / "predictions.json", output)
    return predicted
