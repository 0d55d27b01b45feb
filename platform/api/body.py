"""Request bodies decoded strictly, with errors that say what to fix.

JSON types are taken as sent, as OpenAI's API does: `"max_tokens": "3"` or
`"stream": "true"` is an error naming the field, not quietly converted. A body that is
not JSON is described by the standard library's parser (line and column), which also
tells a lone UTF-16 surrogate and a body nested too deeply apart from a cut-off one.
"""

from __future__ import annotations

import json
import re
from typing import TypeVar

import msgspec

from vigil.platform.errors import InvalidRequest

T = TypeVar("T")

_PATH = re.compile(r" - at `\$\.?([^`]*)`$")
_FIELD = re.compile(r"field `([^`]+)`")
_LONE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def decode_body(body: bytes, type_: type[T]) -> T:
    if not body.strip():
        raise InvalidRequest("The request body is empty; send a JSON object.", code="invalid_json")
    try:
        return msgspec.json.decode(body, type=type_, strict=True)
    except msgspec.ValidationError as exc:
        raise _invalid_value(str(exc)) from None
    except msgspec.DecodeError:
        raise _invalid_json(body) from None


def _invalid_value(detail: str) -> InvalidRequest:
    """From msgspec's 'Expected `int`, got `str` - at `$.max_tokens`'."""
    param = None
    at = _PATH.search(detail)
    if at is not None:
        detail = detail[: at.start()]
        param = at.group(1) or None
    elif (named := _FIELD.search(detail)) is not None:
        param = named.group(1)  # a missing or unknown top-level field
    where = f" for '{param}'" if param else ""
    return InvalidRequest(f"Invalid request{where}: {detail}.", param=param, code="invalid_value")


def _invalid_json(body: bytes) -> InvalidRequest:
    try:
        json.loads(body)
    except RecursionError:
        why = "it is nested too deeply"
    except (ValueError, UnicodeDecodeError) as exc:
        why = str(exc)
    else:  # valid to Python's parser, not to a strict one: only lone surrogates do that
        why = "it holds a lone UTF-16 surrogate escape (such as \\ud800), which is no character"
        if not _LONE_SURROGATE.search(body):
            why = "it could not be decoded"
    return InvalidRequest(
        f"The request body is not valid JSON ({why}); send a JSON object.", code="invalid_json"
    )
