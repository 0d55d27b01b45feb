"""Progress of model loading: a bar on a terminal (silent in logs and tests), and the
fraction done for whoever listens in this context (a worker reporting its loads)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")

_listener: ContextVar[Callable[[float], None] | None] = ContextVar("progress", default=None)


@contextlib.contextmanager
def report_progress(listener: Callable[[float], None]) -> Iterator[None]:
    """Send `listener` the fraction (0-1) of each loading loop run inside this block."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)


def progress(items: Sequence[T], desc: str, unit: str) -> Iterator[T]:
    listener = _listener.get()
    # disable=None: tqdm draws only when stderr is a terminal.
    for done, item in enumerate(tqdm(items, desc=desc, unit=unit, disable=None, leave=False)):
        yield item
        if listener is not None:
            listener((done + 1) / len(items))
