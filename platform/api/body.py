"""Request bodies decoded strictly, with errors that say what to fix.

JSON types are taken as sent, as OpenAI's API does: `"max_tokens": "3"` or
`"stream": "true"` is an error naming the field, not quietly converted. A body that is
not JSON is described by the standard library's parser (line and column), which also
tells a lone UTF-16 surrogate and a body nested too deeply apart from a cut-off one.

Both ways a body is read go through here: the OpenAI routes decode it straight into
their types (`decode_body`); every other route (the admin API, the workers' calls) takes
its JSON through `BodyRequest.json`, whose values Litestar then checks against the
route's types. Either way a body nested deeper than the decoder goes (msgspec raises
RecursionError there) is a 400 that says so, not a 500.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

import msgspec
from litestar import Request
from litestar.types import Empty

from vigil.platform.errors import InvalidRequest
from vigil.platform.wire.choices import choices_at, path_segments, with_choices

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
        raise _invalid_value(str(exc), type_) from None
    except (msgspec.DecodeError, RecursionError):
        raise _invalid_json(body) from None


def decode_json(body: bytes) -> Any:
    """The body's JSON values, untyped (an empty body reads as null, as Litestar's own)."""
    try:
        return msgspec.json.decode(body or b"null")
    except (msgspec.DecodeError, RecursionError):
        raise _invalid_json(body) from None


class BodyRequest(Request[Any, Any, Any]):
    """Litestar's request, its JSON read by `decode_json`."""

    async def json(self) -> Any:
        if self._json is Empty:
            if (cached := self._connection_state.json) is not Empty:
                self._json = cached
            else:
                self._json = self._connection_state.json = decode_json(await self.body())
        return self._json


def _invalid_value(detail: str, type_: Any) -> InvalidRequest:
    """From msgspec's 'Expected `int`, got `str` - at `$.max_tokens`'; an enum's valid
    values are listed."""
    param = None
    at = _PATH.search(detail)
    if at is not None:
        detail = detail[: at.start()]
        param = at.group(1) or None
        detail = with_choices(detail, choices_at(type_, path_segments(param or "")))
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
