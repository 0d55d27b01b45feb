"""Progress bars for model loading: shown on a terminal, silent in logs and tests."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")


def progress(items: Iterable[T], desc: str, unit: str) -> Iterator[T]:
    # disable=None: tqdm draws only when stderr is a terminal.
    yield from tqdm(items, desc=desc, unit=unit, disable=None, leave=False)
