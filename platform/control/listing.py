"""What the record lists (the audit log, the decisions) take besides their own filters:
a time range, a page (newest first, `before` the id the previous page ended at), and
one rule for what a reader may send. The admin API and the console read the same
query parameters through these, so a filter means the same in both and a typo is a
400 that lists what is valid, never a filter silently ignored."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from sqlalchemy import Select
from sqlalchemy.orm import QueryableAttribute

from vigil.platform.errors import InvalidRequest

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class TimeRange:
    since: datetime | None = None  # inclusive
    until: datetime | None = None  # exclusive


ANY_TIME = TimeRange()


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a list, newest first; `next_before` is the `before` of the next
    (older) page, None on the last."""

    items: list[T]
    next_before: int | None


def check_known(given: Iterable[str], allowed: Collection[str]) -> None:
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise InvalidRequest(
            f"unknown filter {', '.join(repr(u) for u in unknown)}; this list takes "
            f"{', '.join(sorted(allowed))}",
            param=unknown[0],
            code="unknown_parameter",
        )


def check_choice(value: str | None, name: str, choices: Collection[str]) -> str | None:
    """The value when it is one of `choices` (or absent); else a 400 listing them."""
    if value is None or value in choices:
        return value
    raise InvalidRequest(
        f"{name} must be one of {', '.join(choices)}; got {value!r}",
        param=name,
        code="invalid_value",
    )


def parse_time(value: str | None, name: str) -> datetime | None:
    """An ISO 8601 time; without an offset it is taken as UTC (the console shows UTC)."""
    if value is None:
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidRequest(
            f"{name} must be an ISO 8601 time such as 2026-12-04T10:30:00Z; got {value!r}",
            param=name,
            code="invalid_value",
        ) from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def time_range(since: str | None, until: str | None) -> TimeRange:
    span = TimeRange(parse_time(since, "since"), parse_time(until, "until"))
    if span.since is not None and span.until is not None and span.since >= span.until:
        raise InvalidRequest("since must be before until", param="since", code="invalid_value")
    return span


def check_limit(limit: int, most: int) -> None:
    if not 1 <= limit <= most:
        raise InvalidRequest(f"limit must be between 1 and {most}, got {limit}", param="limit")


def page_of(items: list[T], limit: int, id_of: Callable[[T], int]) -> Page[T]:
    """A page from up to limit + 1 items read: one more than fits means there is a next."""
    if len(items) > limit:
        kept = items[:limit]
        return Page(kept, id_of(kept[-1]))
    return Page(items, None)


def in_page(
    stmt: Select[Any],
    at: QueryableAttribute[datetime],
    row_id: QueryableAttribute[int],
    span: TimeRange,
    before_id: int | None,
) -> Select[Any]:
    """`stmt` kept to the rows `at` within `span` and, on a next page, older than
    `before_id`."""
    if span.since is not None:
        stmt = stmt.where(at >= span.since)
    if span.until is not None:
        stmt = stmt.where(at < span.until)
    if before_id is not None:
        stmt = stmt.where(row_id < before_id)
    return stmt
