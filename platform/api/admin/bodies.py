"""What every admin request body shares: unknown fields are refused, so that a typo is
a 400 rather than a silent no-op; and the field types several domains use. In a PATCH
body a field left out keeps its value (`UNSET`) and `null` clears it."""

from __future__ import annotations

from typing import Annotated, TypeVar

from msgspec import UNSET, Meta, Struct, UnsetType

Name = Annotated[str, Meta(min_length=1, max_length=200)]
Percent = Annotated[int, Meta(ge=0, le=100)]
PositiveInt = Annotated[int, Meta(ge=1)]
Revision = Annotated[int, Meta(ge=1)]
VersionName = Annotated[str, Meta(min_length=1, max_length=100)]

T = TypeVar("T")


class In(Struct, forbid_unknown_fields=True, kw_only=True):
    pass


def given(value: T | UnsetType) -> T | None:
    """A PATCH field of one that cannot be cleared, as the services take it: None
    (keep) when the body left it out."""
    return None if value is UNSET else value
