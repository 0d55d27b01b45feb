"""The hand-written BERT and the embedding pipeline against transformers, on the bundled MiniLM."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from vigil.engine.bundled import MINILM, bundled_source
from vigil.engine.loaders.embedder import EmbeddingModel, load_embedding_model
from vigil.engine.loaders.embedder_tokenizer import read_embedding_tokenizer
from vigil.engine.model.config import Pooling

pytestmark = pytest.mark.slow

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The new movie is awesome!",
    "Écoute, naïve: 42 x 3.5 = 147 ✓",
    "",
    # 232 tokens: past the 128 that tokenizer.json would truncate to if left on.
    " ".join(f"word{i}" for i in range(100)),
]


@pytest.fixture(scope="module")
def reference() -> Any:
    from transformers import AutoModel, AutoTokenizer

    folder = bundled_source(MINILM).path
    return AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()


def _reference_hidden(reference: Any, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    tokenizer, model = reference
    batch = tokenizer(texts, padding=True, truncation=False, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**batch).last_hidden_state  # (N, T, C)
    return hidden, batch["attention_mask"]


def test_embeddings_match_transformers_mean_pooling(minilm: EmbeddingModel, reference: Any) -> None:
    hidden, mask = _reference_hidden(reference, SENTENCES)
    weights = mask.unsqueeze(-1).float()  # (N, T, 1)
    expected = F.normalize((hidden * weights).sum(1) / weights.sum(1), dim=-1)  # (N, C)
    ours = minilm.embed(SENTENCES)
    assert ours.shape == (len(SENTENCES), 384)
    assert ours.dtype == torch.float32 and ours.device.type == "cpu"
    cosines = F.cosine_similarity(ours, expected, dim=-1)
    assert bool((cosines > 0.9999).all()), cosines
    assert torch.allclose(ours.norm(dim=-1), torch.ones(len(SENTENCES)), atol=1e-5)


def test_last_hidden_state_matches_transformers(minilm: EmbeddingModel, reference: Any) -> None:
    hidden, mask = _reference_hidden(reference, SENTENCES[:3])
    tokenizer, _ = reference
    ids = tokenizer(SENTENCES[:3], padding=True, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        ours = minilm.model(ids, mask)  # (N, T, C)
    real = mask.bool()
    assert (ours[real] - hidden[real]).abs().max().item() < 1e-4


def test_cls_pooling_takes_first_token(minilm: EmbeddingModel, reference: Any) -> None:
    cls_model = dataclasses.replace(minilm, pooling=Pooling.CLS, normalize=False)
    hidden, _ = _reference_hidden(reference, SENTENCES[:3])
    ours = cls_model.embed(SENTENCES[:3])
    assert (ours - hidden[:, 0]).abs().max().item() < 1e-4


def test_known_sentence_pair_similarity(minilm: EmbeddingModel) -> None:
    a, b = minilm.embed(["A man is eating food.", "A man is eating a piece of bread."])
    assert float(a @ b) == pytest.approx(0.755, abs=0.005)


def test_padded_batch_equals_each_text_alone(minilm: EmbeddingModel) -> None:
    texts = ["Hi.", SENTENCES[1], SENTENCES[-1], "Short again"]
    batched = minilm.embed(texts)
    alone = torch.cat([minilm.embed([t]) for t in texts])
    assert (batched - alone).abs().max().item() < 1e-5


def test_tokens_include_cls_and_sep_and_are_never_truncated(minilm: EmbeddingModel) -> None:
    empty, food, long = (len(row) for row in minilm.tokenize(["", SENTENCES[0], SENTENCES[-1]]))
    assert (empty, food) == (2, 8)  # 6 word pieces + [CLS] [SEP]
    assert long > 128
    assert (minilm.dim, minilm.max_seq_len) == (384, 256)


def test_the_tokenizer_read_alone_gives_the_models_ids_and_window(minilm: EmbeddingModel) -> None:
    """What the gateway tokenizes with: the same ids the model would make, no weights read."""
    tokenizer = read_embedding_tokenizer(bundled_source(MINILM).path)
    assert [tokenizer.encode(t) for t in SENTENCES] == minilm.tokenize(SENTENCES)
    assert tokenizer.max_input_tokens == minilm.max_seq_len


def test_too_long_text_raises_with_limit_in_message(minilm: EmbeddingModel) -> None:
    with pytest.raises(ValueError, match=r"input\[1\] is \d+ tokens.*at most 256"):
        minilm.embed(["fine", "word " * 300])


@pytest.mark.parametrize(
    ("texts", "message"),
    [([], "at least one text"), (["ok", 3], r"input\[1\] is int"), ("a string", "list")],
)
def test_bad_input_raises_value_error(minilm: EmbeddingModel, texts: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        minilm.embed(texts)


def test_unsupported_pooling_mode_is_rejected(tmp_path: Path) -> None:
    source = bundled_source(MINILM)
    folder = tmp_path / "model"
    shutil.copytree(source.path, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    pooling = folder / "1_Pooling" / "config.json"
    cfg = json.loads(pooling.read_text()) | {
        "pooling_mode_mean_tokens": False,
        "pooling_mode_max_tokens": True,
    }
    pooling.write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"pooling_mode_max_tokens.*not supported"):
        load_embedding_model(
            dataclasses.replace(source, path=folder), torch.device("cpu"), torch.float32
        )
