"""Dynamic batching for single-pass models (embeddings): many small requests, one forward.

`form_batch` is the decider: a pure function of the pending items and the time.
`AsyncEmbedder` is the shell: it holds the clock, the queue and a dedicated
model thread (torch releases the GIL inside its kernels, so the event loop stays
responsive), as `async_engine.py` does for generation.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import NewType

import torch

from vigil.engine.config import BatcherConfig
from vigil.engine.loaders.embedder import EmbeddingModel
from vigil.engine.stats import BatchRecord

log = logging.getLogger(__name__)

ItemId = NewType("ItemId", int)


@dataclass(frozen=True, slots=True)
class PendingItem:
    """One text waiting to be embedded (a request with several texts is several items)."""

    item_id: ItemId
    num_tokens: int
    arrival_ts: float  # time.monotonic() when its request was accepted


@dataclass(frozen=True, slots=True)
class RunBatch:
    items: tuple[PendingItem, ...]  # in arrival order


@dataclass(frozen=True, slots=True)
class WaitUntil:
    deadline_ts: float | None  # decide again then (or at the next arrival); None: nothing pending


BatchDecision = RunBatch | WaitUntil


def form_batch(
    pending: Sequence[PendingItem], now_ts: float, config: BatcherConfig
) -> BatchDecision:
    """Run a batch once `max_batch_size` items are pending or the oldest has waited
    `max_wait_ms`, whichever comes first; otherwise say when to look again.

    Who goes in the batch:
    - everything pending, when it fits in one batch: a second forward pass would
      cost more than the padding it saves;
    - otherwise the oldest item, plus the `max_batch_size - 1` others closest to it
      in token length (ties: earlier arrival first). Similar lengths mean little
      padding, and always taking the oldest bounds every item's wait: an item is
      the oldest after at most as many batches as there are items ahead of it.
    """
    if not pending:
        return WaitUntil(None)
    oldest = min(pending, key=lambda item: item.arrival_ts)
    deadline_ts = oldest.arrival_ts + config.max_wait_ms / 1000.0
    if len(pending) < config.max_batch_size and now_ts < deadline_ts:
        return WaitUntil(deadline_ts)
    if len(pending) <= config.max_batch_size:
        return RunBatch(_by_arrival(pending))
    others = [item for item in pending if item is not oldest]
    others.sort(key=lambda item: (abs(item.num_tokens - oldest.num_tokens), item.arrival_ts))
    return RunBatch(_by_arrival([oldest, *others[: config.max_batch_size - 1]]))


def _by_arrival(items: Sequence[PendingItem]) -> tuple[PendingItem, ...]:
    return tuple(sorted(items, key=lambda item: item.arrival_ts))


@dataclass(frozen=True, slots=True)
class EmbedderStats:
    num_waiting: int  # items accepted but not yet in a forward pass
    num_batches: int  # forward passes so far
    last_batch_size: int
    last_batch_wait_s: float  # how long the batch's oldest item waited
    last_batch_run_s: float  # padding, forward, pooling, conversion to lists


BatchObserver = Callable[[BatchRecord], None]


@dataclass(slots=True)
class _Item:
    pending: PendingItem
    token_ids: list[int]
    future: asyncio.Future[list[float]]  # touched only on the event loop


class AsyncEmbedder:
    def __init__(
        self, model: EmbeddingModel, config: BatcherConfig, on_batch: BatchObserver | None = None
    ) -> None:
        """on_batch runs in the model thread after every batch: keep it cheap."""
        self.model = model
        self.config = config
        self._on_batch = on_batch
        self._inbox: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._next_id = 0
        self._stats = EmbedderStats(0, 0, 0, 0.0, 0.0)

    def start(self) -> None:
        assert self._thread is None, "embedder already started"
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(
            target=self._run, name=f"embedder-{self.model.name}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Finish the batch in flight; fail every item still waiting."""
        if self._thread is not None:
            self._inbox.put(None)
            self._thread.join(timeout=30)
            self._thread = None

    def stats(self) -> EmbedderStats:
        """The latest snapshot (no locking: the model thread replaces it whole)."""
        return self._stats

    async def embed_ids(self, token_ids: list[list[int]]) -> list[list[float]]:
        """One vector per row of token ids (the model's own tokenizer's, [CLS] and [SEP]
        included: the gateway's), in order. RequestRejected for ids the model cannot
        embed, before queueing."""
        assert self._loop is not None and self._thread is not None, "call start() first"
        self.model.check_token_ids(token_ids)
        arrival_ts = time.monotonic()
        items = []
        for ids in token_ids:
            item_id = ItemId(self._next_id)
            self._next_id += 1
            pending = PendingItem(item_id, len(ids), arrival_ts)
            items.append(_Item(pending, ids, self._loop.create_future()))
        for item in items:
            self._inbox.put(item)
        return list(await asyncio.gather(*(item.future for item in items)))

    # --- model thread -------------------------------------------------------

    def _run(self) -> None:
        waiting: dict[ItemId, _Item] = {}  # insertion order = arrival order
        block_s: float | None = None  # None: block until the next arrival
        while True:
            arrivals, stopping = self._take(block_s)
            waiting.update((item.pending.item_id, item) for item in arrivals)
            if stopping:
                break
            now_ts = time.monotonic()
            decision = form_batch([it.pending for it in waiting.values()], now_ts, self.config)
            if isinstance(decision, RunBatch):
                batch = [waiting.pop(p.item_id) for p in decision.items]
                self._run_batch(batch, now_ts, num_waiting=len(waiting))
                block_s = 0.0  # more may be due already: decide again without blocking
            else:
                if self._stats.num_waiting != len(waiting):
                    self._stats = replace(self._stats, num_waiting=len(waiting))
                deadline_ts = decision.deadline_ts
                block_s = None if deadline_ts is None else max(0.0, deadline_ts - now_ts)
        # Items that raced with stop() may still sit in the inbox.
        leftovers = list(waiting.values()) + self._take(0.0)[0]
        self._fail(leftovers, RuntimeError("embedder stopped before this text was embedded"))

    def _take(self, block_s: float | None) -> tuple[list[_Item], bool]:
        """Everything in the inbox, waiting up to `block_s` for the first; and
        whether stop() was asked for."""
        got: list[_Item | None] = []
        try:
            if block_s is None or block_s > 0:
                got.append(self._inbox.get(timeout=block_s))
            while True:
                got.append(self._inbox.get_nowait())
        except queue.Empty:
            pass
        return [item for item in got if item is not None], None in got

    def _run_batch(self, batch: list[_Item], start_ts: float, num_waiting: int) -> None:
        try:
            vectors: torch.Tensor = self.model.embed_token_ids([it.token_ids for it in batch])
            rows: list[list[float]] = vectors.tolist()  # (N, dim) -> lists, off the event loop
        except Exception as exc:
            log.exception("embedding batch of %d failed", len(batch))
            self._fail(batch, exc)
            rows = []
        run_s = time.monotonic() - start_ts
        if self._on_batch is not None:
            waits = tuple(start_ts - it.pending.arrival_ts for it in batch)
            self._on_batch(BatchRecord(len(batch), waits, run_s))
        self._stats = EmbedderStats(
            num_waiting=num_waiting,
            num_batches=self._stats.num_batches + 1,
            last_batch_size=len(batch),
            last_batch_wait_s=start_ts - min(it.pending.arrival_ts for it in batch),
            last_batch_run_s=run_s,
        )
        if rows:
            assert self._loop is not None
            results = [(it.future, row) for it, row in zip(batch, rows, strict=True)]
            self._loop.call_soon_threadsafe(_deliver, results)

    def _fail(self, items: list[_Item], exc: BaseException) -> None:
        if items and self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(_deliver_error, [it.future for it in items], exc)


def _deliver(results: list[tuple[asyncio.Future[list[float]], list[float]]]) -> None:
    for future, row in results:
        if not future.done():  # a cancelled request leaves its futures cancelled
            future.set_result(row)


def _deliver_error(futures: list[asyncio.Future[list[float]]], exc: BaseException) -> None:
    for future in futures:
        if not future.done():
            future.set_exception(exc)
