"""The values an enum field takes, found from a request type and the path of the field
that got a bad one, so that a 400 can list them.

msgspec says only "Invalid enum value 'x' - at `$.fallback.trigger`": the valid values
are in the type (an Enum or a Literal, maybe inside an optional, a list or a nested
struct), which `msgspec.inspect` walks without any type written out by hand.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import msgspec

_SEGMENT = re.compile(r"([^.\[\]]+)|\[(\d+)\]")
_SEQUENCES = (
    msgspec.inspect.ListType,
    msgspec.inspect.SetType,
    msgspec.inspect.FrozenSetType,
    msgspec.inspect.VarTupleType,
)


def path_segments(path: str) -> list[str]:
    """`fallback.trigger` or `events[1]` as the steps into a type: names, and `[]` for
    an item of a list."""
    return [name if name else "[]" for name, _ in _SEGMENT.findall(path)]


def choices_at(annotation: Any, path: Sequence[str]) -> tuple[str, ...] | None:
    """The values of the enum or Literal at `path` inside `annotation`; None when the
    field there is no enum (or the type cannot be inspected)."""
    try:
        info = msgspec.inspect.type_info(annotation)
    except (TypeError, ValueError):
        return None
    for step in path:
        found = _step(info, step)
        if found is None:
            return None
        info = found
    return _values(info)


def _step(info: msgspec.inspect.Type, step: str) -> msgspec.inspect.Type | None:
    for candidate in _alternatives(info):
        if step == "[]" and isinstance(candidate, _SEQUENCES):
            return candidate.item_type
        if isinstance(candidate, msgspec.inspect.StructType):
            for field in candidate.fields:
                if step in (field.encode_name, field.name):
                    return field.type
    return None


def _alternatives(info: msgspec.inspect.Type) -> tuple[msgspec.inspect.Type, ...]:
    """A union's members (`X | None`), or the type itself."""
    if isinstance(info, msgspec.inspect.UnionType):
        return info.types
    return (info,)


def _values(info: msgspec.inspect.Type) -> tuple[str, ...] | None:
    for candidate in _alternatives(info):
        if isinstance(candidate, msgspec.inspect.EnumType):
            return tuple(str(member.value) for member in candidate.cls)
        if isinstance(candidate, msgspec.inspect.LiteralType):
            return tuple(str(value) for value in candidate.values)
    return None


def with_choices(detail: str, choices: Sequence[str] | None) -> str:
    """msgspec's "Invalid enum value 'x'" followed by what is valid."""
    if not choices or not detail.startswith("Invalid enum value"):
        return detail
    return f"{detail}; valid values: {', '.join(choices)}"
