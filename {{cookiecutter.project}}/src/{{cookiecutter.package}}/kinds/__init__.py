"""Input kinds as plug-ins: one module per kind (image.py, table.py), found by the contract's
`input.kind`, the module's name. Only these modules know what a kind's samples look like;
datamodules, inference, serving, the page and export ask them through `get(kind)`.

A kind module defines, with numpy, Pillow or pandas and never torch:

- `Preprocessing`, a `contract.Preprocessing` model: its part of the data contract, fitted on
  the training split by its `fit(...)` (its datamodules call it; what it is fitted on differs
  per kind) and applied by its `encode(...)`, in training and in prediction alike;
- `input_shape(preprocessing) -> list[int]`: one encoded sample's shape;
- `read_inputs(path, preprocessing) -> (inputs, sources)`: predict's inputs from a file or
  folder, with where each sample came from (`{"file": ..., "index": ...}`);
- `from_arrays(array, preprocessing, source) -> inputs`: raw values as the dataset stores them
  (a .npy file, a request's `inputs`);
- `from_json(payload, preprocessing) -> inputs`: a request's JSON body (`inputs` or `rows`);
- `REQUEST`: what a request sends, for one-line refusals;
- `UPLOAD`: what the page's file chooser accepts (e.g. "image/*"), or None; if not None,
  `from_upload(data, name, preprocessing) -> inputs` for an uploaded file's bytes (a
  `console.TooLarge` for one too large to decode);
- `form(preprocessing) -> dict`: what the page asks for (`{"type": "file" | "fields", ...}`);
- `check(preprocessing, shape, where)`: refuses, in one line, a manifest's preprocessing that
  cannot feed a model of input `shape`.

Inputs are float32 arrays of (N, *input_shape); a bad one is a UserError with one line.
"""

import sys
from types import ModuleType

from .. import plugins


def get(kind: str) -> ModuleType:
    return plugins.find(sys.modules[__name__], kind, "input kind")
