"""Predict: classes or values of raw samples, image files or table rows, with onnxruntime and
without torch."""

from pathlib import Path
from types import ModuleType

from ..console import UserError, format_table, show
from ..files import save_json
from ..inference import load_export, non_finite, predictions, read_inputs, task_of
from ..options import PredictOptions, validated
from ..run_dir import name_too_long


def source_name(source: dict) -> str:
    return source["file"] if source["index"] is None else f"{source['file']}[{source['index']}]"


def table_rows(prediction: dict, task: ModuleType) -> list[list[str]]:
    """One row per sample; with top_k > 1 one per listed class, the sample named on the first."""
    name = source_name(prediction)
    if "invalid" in prediction:
        return [[name, prediction["invalid"], *["-"] * (len(task.COLUMNS) - 1)]]
    return [[name if rank == 0 else "", *row] for rank, row in enumerate(task.rows(prediction))]


def checked_options(cfg) -> PredictOptions:
    options = validated(PredictOptions, cfg)
    problem = name_too_long(Path(options.output_dir), "output_dir")
    if problem:
        raise UserError(problem)
    if Path(options.output_dir).is_file():
        raise UserError(
            f"output_dir={options.output_dir} is a file; pass a folder for predictions.json"
        )
    return options


def predict(cfg) -> list[dict]:
    """Predicts every sample of `cfg.input`, prints a table and writes predictions.json."""
    options = checked_options(cfg)
    session, manifest = load_export(Path(options.model_path), variant=options.variant)
    inputs, sources = read_inputs(Path(options.input), manifest)
    invalid = non_finite(inputs)
    if invalid.any() and options.invalid_inputs == "error":
        names = [source_name(source) for source, bad in zip(sources, invalid, strict=True) if bad]
        raise UserError(
            f"{len(names)} samples hold NaN or infinite values ({', '.join(names[:3])}"
            f"{', ...' if len(names) > 3 else ''}); fix them, or pass invalid_inputs=mark to "
            "predict the others"
        )
    finite = inputs[~invalid] if invalid.any() else inputs  # a copy only to leave samples out
    results = iter(predictions(session, manifest, finite, options.top_k))
    predicted = [
        source | ({"invalid": "NaN or infinite values"} if bad else next(results))
        for source, bad in zip(sources, invalid, strict=True)
    ]
    task = task_of(manifest)
    rows = [row for prediction in predicted for row in table_rows(prediction, task)]
    show(format_table(["input", *task.COLUMNS], rows))
    output = {
        "model": options.model_path,
        "variant": options.variant,
        "task": manifest.task,
        "predictions": predicted,
    }
    save_json(Path(options.output_dir) / "predictions.json", output)
    return predicted
