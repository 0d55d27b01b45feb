"""What /schema/openapi.json says about each /v1 operation, taken from the msgspec types
that decode its request and encode its answers.

Litestar derives a schema from a handler's types, but drops a bound of 0 on an optional
field (`temperature >= 0`, `top_p > 0`), the constraints on list items and union members
and `additionalProperties: false`; it cannot say that one 200 is either a JSON body or an
SSE stream; and it documents its own validation error, not the OpenAI error body that
every error here carries (errors.py). So each /v1 route hands Litestar an `operation_class`
that swaps in msgspec's JSON Schema of the very types the server validates with: the
schema cannot drift from the validator. (Litestar still lists its own copies of these types
under components/schemas; no /v1 operation refers to them.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import msgspec
from litestar.openapi.spec import Operation

from vigil.platform.wire.errors import ErrorBody

ERRORS: dict[int, str] = {
    400: "Invalid request: a field is missing, malformed, out of range or not supported, or "
    "the prompt and max_tokens do not fit (code `context_length_exceeded`). `param` names "
    "the field to fix.",
    401: "No API key, or an unknown or revoked one (when the server requires keys).",
    403: "The API key may not use this model.",
    404: "No model of that name is served; the message lists those that are.",
    413: "The request body is larger than the server takes (10 MB by default).",
    429: "The key's rate limit, or the deployment is shedding load (code `overloaded_*`); "
    "retry after Retry-After seconds.",
    500: "The server or the engine failed; the error has been logged.",
    503: "The model is still loading or failed to load, or the request waited in the queue "
    "past its deadline without starting (code `queue_timeout`).",
}

_REQUEST_ID = {
    "description": "The completion id for a completion; a fresh id for anything else.",
    "required": True,
    "schema": {"type": "string"},
}
_SERVED_BY = {
    "description": "model/version that computed the answer.",
    "required": True,
    "schema": {"type": "string"},
}
_FALLBACK_FROM = {
    "description": "The deployment asked for, when an overloaded one fell back to another.",
    "schema": {"type": "string"},
}
_RETRY_AFTER = {"description": "Seconds to wait before retrying.", "schema": {"type": "string"}}
_PRIORITY = {
    "name": "x-vigil-priority",
    "in": "header",
    "required": False,
    "description": "Lowers an interactive key's requests to batch (never raises them).",
    "schema": {"enum": ["interactive", "batch"]},
}


def json_schema(type_: Any) -> dict[str, Any]:
    """msgspec's JSON Schema for a type, its definitions inlined: an OpenAPI document
    resolves a `$ref` from its own root, where msgspec's `#/$defs/...` do not exist."""
    (schema,), definitions = msgspec.json.schema_components([type_], ref_template="{name}")
    return _inline(schema, definitions)


def _inline(node: Any, definitions: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:  # msgspec's types here are acyclic
            return _inline(definitions[node["$ref"]], definitions)
        return {key: _inline(value, definitions) for key, value in node.items()}
    if isinstance(node, list):
        return [_inline(item, definitions) for item in node]
    return node


def sse_event_schema(chunk_type: Any) -> dict[str, Any]:
    """One Server-Sent Event of a stream (OpenAPI 3.1 reads an event-stream `schema` per
    event): a JSON chunk, an error body when the request failed after the stream began,
    and last the literal `[DONE]`."""
    payload = {"anyOf": [json_schema(chunk_type), json_schema(ErrorBody)]}
    return {
        "type": "object",
        "required": ["data"],
        "properties": {
            "data": {
                "type": "string",
                "if": {"const": "[DONE]"},
                "else": {"contentMediaType": "application/json", "contentSchema": payload},
            }
        },
    }


@dataclass(frozen=True, slots=True)
class OperationDocs:
    ok: Any  # the type of the 200 JSON body
    ok_description: str
    request: Any | None = None  # the type of the JSON request body
    stream_chunk: Any | None = None  # set: a 200 may instead be an SSE stream of these
    errors: tuple[int, ...] = (400, 401, 429, 500)
    served_by: bool = False  # the 200 names the model/version that served it
    may_fall_back: bool = False  # the 200 may come from a fallback deployment

    def apply(self, operation: dict[str, Any]) -> dict[str, Any]:
        operation = dict(operation)
        if self.request is not None:
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": json_schema(self.request)}},
            }
        operation["parameters"] = [*operation.get("parameters", []), _PRIORITY]
        responses = {"200": self._ok()}
        for status in sorted(self.errors):
            headers: dict[str, Any] = {"x-request-id": _REQUEST_ID}
            if status in (429, 503):
                headers["Retry-After"] = {**_RETRY_AFTER, "required": status == 429}
            responses[str(status)] = {
                "description": ERRORS[status],
                "headers": headers,
                "content": {"application/json": {"schema": json_schema(ErrorBody)}},
            }
        operation["responses"] = responses
        return operation

    def _ok(self) -> dict[str, Any]:
        headers: dict[str, Any] = {"x-request-id": _REQUEST_ID}
        if self.served_by:
            headers["x-vigil-served-by"] = _SERVED_BY
        if self.may_fall_back:
            headers["x-vigil-fallback-from"] = _FALLBACK_FROM
        content: dict[str, Any] = {"application/json": {"schema": json_schema(self.ok)}}
        if self.stream_chunk is not None:
            content["text/event-stream"] = {"schema": sse_event_schema(self.stream_chunk)}
        return {"description": self.ok_description, "headers": headers, "content": content}


class DocumentedOperation(Operation):
    """Litestar's Operation with `docs` applied when the schema is rendered."""

    docs: ClassVar[OperationDocs]

    def to_schema(self) -> dict[str, Any]:
        return self.docs.apply(super().to_schema())


def documented(docs: OperationDocs) -> type[Operation]:
    """An `operation_class` for a route: Litestar builds the operation, `docs` then
    replaces its request body and responses."""
    return type("DocumentedOperation", (DocumentedOperation,), {"docs": docs})
