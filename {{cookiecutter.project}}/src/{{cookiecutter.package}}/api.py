"""The HTTP API's bodies as Pydantic models, built for one export: the JSON requests that
POST /predict takes (serving.py validates each with them), its answers and
its refusals, and the OpenAPI document that describes them, published at /openapi.json."""

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    create_model,
)

from . import targets
from .console import UserError
from .contract import Manifest
from .inference import kind_of


def whole_numbers_only(value: Any) -> Any:
    """Booleans and text are not numbers (lax validation would read True and "3" as ones)."""
    if isinstance(value, bool | str):
        raise ValueError("top_k must be a whole number")
    return value


# 3.0 is a whole number, as JSON Schema's "integer" says; 2**53 bounds what JSON holds exactly.
MOST_TOP_K = 2**53
TopK = Annotated[
    int,
    Field(
        strict=False,
        ge=1,
        le=MOST_TOP_K,
        description="How many of the most probable classes to list (1: the best alone), in the "
        "body or in the query; where both give one, both are checked and the body's counts",
    ),
    BeforeValidator(whole_numbers_only),
]


TOP_K = TypeAdapter(TopK)


def top_k(value: Any) -> int:
    """A request's top_k, from the body or the query (a string of digits there)."""
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    try:
        return TOP_K.validate_python(value)
    except ValidationError:
        raise UserError(
            f"top_k={value} must be a whole number of at least 1 (and at most 2**53)"
        ) from None


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    top_k: TopK = 1


class Refusal(BaseModel):
    detail: str = Field(description="What is wrong with the request, and how to fix it")


class Health(BaseModel):
    status: Literal["ok"]


# Each refusal of POST /predict, and when it comes.
REFUSALS = {
    400: "The body is empty, not valid JSON, a malformed multipart form or not a readable file",
    401: "The API key is missing or wrong (when the server has one)",
    408: "The body did not arrive within read_timeout",
    413: "The body, a decoded image or the number of samples is over the server's limits",
    415: "A Content-Type other than JSON (or multipart, where the model takes files)",
    422: "The JSON does not match the model's input, or holds NaN or infinite values",
}


def request_models(manifest: Manifest) -> dict[str, type[Body]]:
    """One model per JSON form of the input kind, by the key that holds the samples."""
    forms = kind_of(manifest).json_forms(manifest.preprocessing)
    return {
        key: create_model(f"{key.capitalize()}Request", __base__=Body, **{key: (kind, ...)})  # type: ignore[call-overload]
        for key, kind in forms.items()
    }


def answer_model(manifest: Manifest) -> type[BaseModel]:
    prediction = targets.get(manifest.task).Prediction
    return create_model("Predictions", predictions=(list[prediction], ...))  # type: ignore[valid-type]


def document(manifest: Manifest, title: str, version: str, api_key: bool) -> dict:
    """The OpenAPI document of the server of this export."""
    requests, kind = request_models(manifest), kind_of(manifest)
    schemas: dict[str, Any] = {}

    def ref(model: type[BaseModel]) -> dict:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
        return {"$ref": f"#/components/schemas/{model.__name__}"}

    def json_content(model: type[BaseModel]) -> dict:
        return {"application/json": {"schema": ref(model)}}

    content: dict[str, Any] = {
        "application/json": {"schema": {"oneOf": [ref(m) for m in requests.values()]}}
    }
    if kind.UPLOAD is not None:
        upload = {
            "type": "string",
            "format": "binary",
            "minLength": 1,
            "description": "The file",
        }
        content["multipart/form-data"] = {
            "schema": {
                "type": "object",
                "properties": {"file": upload},
                "required": ["file"],
                "additionalProperties": False,
            },
            "encoding": {"file": {"contentType": ", ".join(kind.UPLOAD_TYPES)}},
        }
    refusals = {
        str(status): {"description": why, "content": json_content(Refusal)}
        for status, why in REFUSALS.items()
        if api_key or status != 401
    }
    refusals["503"] = {
        "description": "More connections than max_connections",
        "content": {"text/plain": {"schema": {"type": "string"}}},
    }
    secured: list[dict] = [{"APIKey": []}] if api_key else []
    predict = {
        "summary": "Predictions of the model for one or more samples",
        "parameters": [
            {
                "name": "top_k",
                "in": "query",
                "required": False,
                "schema": TOP_K.json_schema(),
            }
        ],
        "requestBody": {"required": True, "content": content},
        "responses": {
            "200": {
                "description": "One prediction per sample",
                "content": json_content(answer_model(manifest)),
            },
            **refusals,
        },
        "security": secured,
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version},
        "paths": {
            "/predict": {"post": predict},
            "/health": {
                "get": {
                    "summary": "Whether the server is ready (it answers once it is)",
                    "responses": {
                        "200": {"description": "Ready", "content": json_content(Health)},
                    },
                }
            },
            "/info": {
                "get": {
                    "summary": "What the model takes and gives, and what serves it",
                    "responses": {
                        "200": {
                            "description": "The model and the server",
                            "content": {"application/json": {"schema": {"type": "object"}}},
                        },
                        **({"401": refusals["401"]} if api_key else {}),
                    },
                    "security": secured,
                }
            },
            "/": {
                "get": {
                    "summary": "A page to try the model",
                    "responses": {
                        "200": {
                            "description": "The page",
                            "content": {"text/html": {"schema": {"type": "string"}}},
                        }
                    },
                }
            },
        },
        "components": {
            "schemas": schemas,
            "securitySchemes": {"APIKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"}},
        },
    }
