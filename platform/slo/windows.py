"""Good/total counts of one SLI over sliding windows, in fixed time buckets.

No per-request rows: a request adds one to its bucket's total (and good) and is
forgotten. A window's counts are the sum of the buckets it covers, so a window is
exact to one bucket at its far edge. Buckets are the shortest alert window's tenth,
and there are enough of them for the longest window.
"""

from __future__ import annotations

import math

BUCKETS_PER_SHORTEST_WINDOW = 10


class WindowCounts:
    def __init__(self, shortest_window_s: float, longest_window_s: float) -> None:
        assert 0 < shortest_window_s <= longest_window_s
        self.bucket_s = shortest_window_s / BUCKETS_PER_SHORTEST_WINDOW
        n = math.ceil(longest_window_s / self.bucket_s) + 1
        self._index = [-1] * n  # which bucket (ts // bucket_s) each slot holds now
        self._good = [0] * n
        self._total = [0] * n

    def add(self, now_ts: float, good: bool) -> None:
        slot = self._slot(int(now_ts // self.bucket_s))
        self._total[slot] += 1
        self._good[slot] += good

    def counts(self, now_ts: float, window_s: float) -> tuple[int, int]:
        """(good, total) over the last window_s seconds, up to now_ts."""
        last = int(now_ts // self.bucket_s)
        first = last - min(len(self._index), math.ceil(window_s / self.bucket_s)) + 1
        good = total = 0
        for bucket in range(first, last + 1):
            slot = bucket % len(self._index)
            if self._index[slot] == bucket:
                good += self._good[slot]
                total += self._total[slot]
        return good, total

    def _slot(self, bucket: int) -> int:
        slot = bucket % len(self._index)
        if self._index[slot] != bucket:  # a bucket that has slid out of every window
            self._index[slot], self._good[slot], self._total[slot] = bucket, 0, 0
        return slot
