"""Good/total counts of one SLI over sliding windows, in time buckets.

No per-request rows: a request adds one to its bucket's total (and good) and is
forgotten. Each window length keeps its own ring of BUCKETS_PER_WINDOW buckets, so a
window is exact to a twentieth of its length at its far edge, and memory does not grow
with the ratio of the longest window to the shortest (a 30-day SLO window next to a
5-minute alert window).
"""

from __future__ import annotations

from collections.abc import Iterable

BUCKETS_PER_WINDOW = 20


class WindowCounts:
    """Counts over the last `window_s` seconds."""

    def __init__(self, window_s: float) -> None:
        assert window_s > 0
        self.window_s = window_s
        self.bucket_s = window_s / BUCKETS_PER_WINDOW
        n = BUCKETS_PER_WINDOW + 1  # the current, partly filled bucket too
        self._index = [-1] * n  # which bucket (ts // bucket_s) each slot holds now
        self._good = [0] * n
        self._total = [0] * n

    def add(self, now_ts: float, good: bool) -> None:
        bucket = int(now_ts // self.bucket_s)
        slot = bucket % len(self._index)
        if self._index[slot] != bucket:  # a bucket that has slid out of the window
            self._index[slot], self._good[slot], self._total[slot] = bucket, 0, 0
        self._total[slot] += 1
        self._good[slot] += good

    def counts(self, now_ts: float) -> tuple[int, int]:
        """(good, total) over the window, up to now_ts."""
        last = int(now_ts // self.bucket_s)
        good = total = 0
        for bucket in range(last - BUCKETS_PER_WINDOW, last + 1):
            slot = bucket % len(self._index)
            if self._index[slot] == bucket:
                good += self._good[slot]
                total += self._total[slot]
        return good, total


class WindowSet:
    """The same counts over several window lengths."""

    def __init__(self, windows_s: Iterable[float]) -> None:
        self._windows = {w: WindowCounts(w) for w in sorted(set(windows_s))}

    def add(self, now_ts: float, good: bool) -> None:
        for counts in self._windows.values():
            counts.add(now_ts, good)

    def counts(self, now_ts: float, window_s: float) -> tuple[int, int]:
        counts = self._windows.get(window_s)
        assert counts is not None, f"no window of {window_s} s is kept"
        return counts.counts(now_ts)
