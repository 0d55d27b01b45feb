"""What changed between two snapshots of a record (an audit entry's before and after):
fields compared by their dotted path (`slo.ttft_p99_s`), so a change deep in a nested
setting is one row, not a whole object that differs."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MISSING = "—"  # a field one side does not have


@dataclass(frozen=True, slots=True)
class FieldChange:
    path: str
    before: str
    after: str


def flatten(snapshot: Mapping[str, Any] | None, prefix: str = "") -> dict[str, Any]:
    """{"slo": {"ttft_p99_s": 5}} -> {"slo.ttft_p99_s": 5}; lists stay whole."""
    flat: dict[str, Any] = {}
    for key, value in (snapshot or {}).items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat |= flatten(value, f"{path}.")
        else:
            flat[path] = value
    return flat


def changed_fields(
    before: Mapping[str, Any] | None, after: Mapping[str, Any] | None
) -> list[FieldChange]:
    """The fields whose value differs, in path order; a creation (no before) or a
    deletion (no after) lists every field it has."""
    old, new = flatten(before), flatten(after)
    return [
        FieldChange(path, _shown(old, path), _shown(new, path))
        for path in sorted(old.keys() | new.keys())
        if old.get(path, MISSING) != new.get(path, MISSING)
    ]


def _shown(flat: Mapping[str, Any], path: str) -> str:
    if path not in flat:
        return MISSING
    value = flat[path]
    return value if isinstance(value, str) else json.dumps(value, default=str)
