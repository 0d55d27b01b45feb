"""The JSON schema the structured-output tests hold a small model to (enums, a nested
object, an array, every field required), shared by the engine's and the API's tests and
timed by ops/bench/api_bench.py."""

from __future__ import annotations

from typing import Any

USER_RECORD: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "role": {"enum": ["admin", "editor", "viewer"]},
        "address": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 12},
                "country": {"enum": ["FR", "IT", "UK"]},
            },
            "required": ["city", "country"],
            "additionalProperties": False,
        },
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
    },
    "required": ["name", "role", "address", "tags"],
    "additionalProperties": False,
}
