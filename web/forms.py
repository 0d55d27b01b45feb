"""Reading the console's forms: each field checked at the boundary, a bad one an
InvalidRequest that names it (shown in the page's flash area)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from litestar import Request
from litestar.datastructures import FormMultiDict

from vigil.platform.errors import InvalidRequest


async def form_of(request: Request[Any, Any, Any]) -> FormMultiDict:
    return await request.form()


def text(form: Mapping[str, Any], name: str, *, required: bool = True) -> str | None:
    value = form.get(name)
    value = value.strip() if isinstance(value, str) else ""
    if not value:
        if required:
            raise InvalidRequest(f"'{name}' is needed.", param=name)
        return None
    return value


def whole(
    form: Mapping[str, Any], name: str, *, low: int, high: int | None = None, required: bool = True
) -> int | None:
    value = text(form, name, required=required)
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise InvalidRequest(
            f"'{name}' must be a whole number, not {value!r}.", param=name
        ) from None
    if number < low or (high is not None and number > high):
        bounds = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise InvalidRequest(f"'{name}' must be {bounds}, not {number}.", param=name)
    return number


def decimal(
    form: Mapping[str, Any],
    name: str,
    *,
    low: float,
    high: float | None = None,
    required: bool = True,
) -> float | None:
    value = text(form, name, required=required)
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        raise InvalidRequest(f"'{name}' must be a number, not {value!r}.", param=name) from None
    if number < low or (high is not None and number > high):
        bounds = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise InvalidRequest(f"'{name}' must be {bounds}, not {number}.", param=name)
    return number


def checked(form: Mapping[str, Any], name: str) -> bool:
    return form.get(name) in ("on", "true", "1")
