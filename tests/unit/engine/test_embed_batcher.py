"""form_batch decisions on scripted timelines, and the async shell on the bundled MiniLM."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch

from vigil.engine.embed_batcher import (
    AsyncEmbedder,
    BatcherConfig,
    ItemId,
    PendingItem,
    RunBatch,
    WaitUntil,
    form_batch,
)
from vigil.engine.loaders.embedder import EmbeddingModel

CONFIG = BatcherConfig(max_batch_size=4, max_wait_ms=5.0)


def _item(item_id: int, num_tokens: int, arrival_ts: float) -> PendingItem:
    return PendingItem(ItemId(item_id), num_tokens, arrival_ts)


def _ids(decision: RunBatch | WaitUntil) -> list[int]:
    assert isinstance(decision, RunBatch), decision
    return [item.item_id for item in decision.items]


def test_nothing_pending_waits_for_an_arrival() -> None:
    assert form_batch([], 10.0, CONFIG) == WaitUntil(None)


def test_waits_until_oldest_reaches_max_wait() -> None:
    pending = [_item(0, 8, 10.0), _item(1, 8, 10.002)]
    assert form_batch(pending, 10.001, CONFIG) == WaitUntil(10.0 + 0.005)


def test_runs_everything_once_oldest_has_waited_max_wait() -> None:
    pending = [_item(0, 8, 10.0), _item(1, 30, 10.002)]
    assert _ids(form_batch(pending, 10.005, CONFIG)) == [0, 1]
    assert _ids(form_batch(pending, 11.0, CONFIG)) == [0, 1]


def test_runs_at_once_when_max_batch_size_items_are_pending() -> None:
    pending = [_item(i, 8, 10.0) for i in range(4)]
    assert _ids(form_batch(pending, 10.0, CONFIG)) == [0, 1, 2, 3]


def test_zero_max_wait_runs_a_single_item_immediately() -> None:
    config = BatcherConfig(max_batch_size=4, max_wait_ms=0.0)
    assert _ids(form_batch([_item(7, 8, 10.0)], 10.0, config)) == [7]


def test_overfull_batch_takes_oldest_and_its_nearest_lengths() -> None:
    # Oldest has 10 tokens; the three closest lengths are 9, 11, 12 -> 200 and 180 wait.
    lengths = [10, 200, 12, 180, 9, 11]
    pending = [_item(i, n, 10.0 + i * 0.001) for i, n in enumerate(lengths)]
    assert _ids(form_batch(pending, 10.0, CONFIG)) == [0, 2, 4, 5]


def test_length_ties_go_to_the_earlier_arrival() -> None:
    # 12 and 8 are both 2 from the oldest's 10: the earlier of each tie wins.
    lengths = [10, 12, 8, 12, 8, 50]
    pending = [_item(i, n, 10.0 + i * 0.001) for i, n in enumerate(lengths)]
    assert _ids(form_batch(pending, 10.0, CONFIG)) == [0, 1, 2, 3]


def test_long_outlier_is_taken_once_it_is_the_oldest() -> None:
    pending = [_item(0, 300, 10.0)] + [_item(i, 5, 10.0 + i * 0.001) for i in range(1, 8)]
    assert _ids(form_batch(pending, 10.0, CONFIG)) == [0, 1, 2, 3]


def test_oldest_is_found_by_timestamp_not_position() -> None:
    pending = [_item(1, 8, 10.003), _item(0, 8, 10.001)]
    assert form_batch(pending, 10.002, CONFIG) == WaitUntil(10.001 + 0.005)


@pytest.mark.parametrize("kwargs", [{"max_batch_size": 0}, {"max_wait_ms": -1.0}])
def test_invalid_config_is_rejected(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="must be >="):
        BatcherConfig(**kwargs)


SENTENCES = [f"Sentence number {i} is {'quite ' * (i % 7)}different." for i in range(20)]


@pytest.mark.slow
async def test_concurrent_requests_are_batched_and_get_their_own_results(
    minilm: EmbeddingModel,
) -> None:
    embedder = AsyncEmbedder(minilm, BatcherConfig(max_batch_size=8, max_wait_ms=20.0))
    embedder.start()
    try:
        rows = minilm.tokenize(SENTENCES)
        results = await asyncio.gather(*(embedder.embed_ids([row]) for row in rows))
        stats = embedder.stats()
    finally:
        embedder.stop()
    for sentence, result in zip(SENTENCES, results, strict=True):
        alone = minilm.embed([sentence])[0]
        assert (torch.tensor(result[0]) - alone).abs().max().item() < 1e-5
    assert 3 <= stats.num_batches < len(SENTENCES)
    assert 1 <= stats.last_batch_size <= 8
    assert stats.num_waiting == 0
    assert stats.last_batch_wait_s >= 0 and stats.last_batch_run_s > 0


@pytest.mark.slow
async def test_request_with_several_texts_gets_results_in_order(minilm: EmbeddingModel) -> None:
    embedder = AsyncEmbedder(minilm, BatcherConfig())
    embedder.start()
    try:
        texts = ["a cat", "A much longer sentence about dogs and parks.", "tea"]
        result = await embedder.embed_ids(minilm.tokenize(texts))
    finally:
        embedder.stop()
    expected = minilm.embed(texts)
    assert (torch.tensor(result) - expected).abs().max().item() < 1e-5


@pytest.mark.slow
@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([], "at least one text"),
        ([[101, 102], [101] * 257], r"input\[1\] has 257 tokens.*limit of 256"),
        ([[101, 30522, 102]], r"input\[0\] is not token ids of this model"),
        ([[101, 102], []], r"input\[1\] is not token ids"),
    ],
)
async def test_ids_the_model_cannot_embed_are_refused_before_queueing(
    minilm: EmbeddingModel, rows: list[list[int]], message: str
) -> None:
    embedder = AsyncEmbedder(minilm, BatcherConfig())
    embedder.start()
    try:
        with pytest.raises(ValueError, match=message):
            await embedder.embed_ids(rows)
        assert embedder.stats().num_batches == 0
    finally:
        embedder.stop()


@pytest.mark.slow
async def test_stop_fails_waiting_requests(minilm: EmbeddingModel) -> None:
    # A long max_wait keeps the item waiting until stop() arrives.
    embedder = AsyncEmbedder(minilm, BatcherConfig(max_wait_ms=60_000.0))
    embedder.start()
    task = asyncio.create_task(embedder.embed_ids(minilm.tokenize(["never embedded"])))
    await asyncio.sleep(0)
    embedder.stop()
    with pytest.raises(RuntimeError, match="stopped"):
        await task
