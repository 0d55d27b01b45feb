"""Embedders as people ship them: sentence-transformers folders, made by the test from
tiny random checkpoints (transformers) and saved by sentence-transformers itself, each
embedded by Vigil and by sentence-transformers' own `encode`: cosine >= 0.9999 a text.

BERT with CLS pooling, BERT with mean pooling unnormalized, XLM-R (positions from
padding_idx + 1) with mean pooling, and decoder embedders (Qwen2, Llama) with
last-token pooling. The folder format is sentence-transformers 6's; the bundled MiniLM
(test_bert.py) is the older one."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import transformers
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models as token_models
from tokenizers import pre_tokenizers, processors

from vigil.engine.bundled import ModelFormat, ModelKind, ModelSource
from vigil.engine.loaders.embedder import EmbeddingModel, load_embedding_model
from vigil.engine.loaders.embedder_tokenizer import read_window
from vigil.engine.loaders.sentence_transformers import read_max_seq_len, read_pipeline
from vigil.engine.model.config import Pooling as VigilPooling

VOCAB = 300
SHAPE: dict[str, Any] = {
    "vocab_size": VOCAB,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "max_position_embeddings": 128,
    "initializer_range": 0.2,  # hidden states far from each other, so pooling shows
    "pad_token_id": 0,
}
# name -> (model_type, what it adds to SHAPE, pooling, normalize, max_seq_length)
CASES: dict[str, tuple[str, dict[str, Any], str, bool, int | None]] = {
    "bert-cls": ("bert", {}, "cls", True, None),
    "bert-mean-unnormalized": ("bert", {}, "mean", False, 48),
    "xlm-roberta-mean": ("xlm-roberta", {"type_vocab_size": 1}, "mean", True, None),
    "qwen2-last-token": ("qwen2", {"num_key_value_heads": 2}, "lasttoken", True, None),
    "llama-last-token": ("llama", {"num_key_value_heads": 2}, "lasttoken", False, None),
}
TEXTS = [
    " ".join(
        f"w{random.Random(i).randint(4, VOCAB - 1)}" for _ in range(random.Random(i).randint(1, 40))
    )
    for i in range(12)
]


def save_word_tokenizer(folder: Path) -> None:
    """Whole words "w4" .. "w299" between [CLS] and [SEP]; the decoders' last token is then
    [SEP], as an embedder's tokenizer appends its end-of-text."""
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3} | {f"w{i}": i for i in range(4, VOCAB)}
    tokenizer = HFTokenizer(token_models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    tokenizer.save(str(folder / "tokenizer.json"))
    special = {
        "pad_token": "[PAD]",
        "unk_token": "[UNK]",
        "cls_token": "[CLS]",
        "sep_token": "[SEP]",
    }
    config = {"tokenizer_class": "PreTrainedTokenizerFast"} | special
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


def save_sentence_transformer(folder: Path, case: str) -> SentenceTransformer:
    model_type, extra, pooling, normalize, max_seq_length = CASES[case]
    checkpoint = folder / "checkpoint"
    config = transformers.AutoConfig.for_model(model_type, **(SHAPE | extra))
    with torch.random.fork_rng():
        torch.manual_seed(4321)
        model = transformers.AutoModel.from_config(config).eval()
        with torch.no_grad():  # norms other than their init, biases other than zero
            for name, param in model.named_parameters():
                if "norm" in name.lower() or name.endswith(".bias"):
                    param.add_(0.2 * torch.randn_like(param))
    model.save_pretrained(checkpoint)
    save_word_tokenizer(checkpoint)
    word = Transformer(str(checkpoint))
    if max_seq_length is not None:
        word.max_seq_length = max_seq_length
    modules: list[Any] = [word, Pooling(word.get_embedding_dimension(), pooling)]
    if normalize:
        modules.append(Normalize())
    st = SentenceTransformer(modules=modules, device="cpu")
    st.save(str(folder / "st"))
    return st


@pytest.fixture(scope="module", params=list(CASES))
def pair(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, SentenceTransformer, EmbeddingModel]:
    folder = tmp_path_factory.mktemp(request.param)
    reference = save_sentence_transformer(folder, request.param)
    source = ModelSource(request.param, ModelKind.EMBED, ModelFormat.HF, folder / "st")
    return (
        request.param,
        reference,
        load_embedding_model(source, torch.device("cpu"), torch.float32),
    )


def test_embeddings_equal_sentence_transformers(
    pair: tuple[str, SentenceTransformer, EmbeddingModel],
) -> None:
    case, reference, ours = pair
    _, _, pooling, normalize, max_seq_length = CASES[case]
    assert (ours.pooling, ours.normalize) == (VigilPooling(pooling), normalize)
    if max_seq_length is not None:
        assert ours.max_seq_len == max_seq_length
    expected = reference.encode(TEXTS, convert_to_tensor=True, batch_size=5).float()
    got = ours.embed(TEXTS)  # one padded batch: padding must not leak into any text's vector
    cosines = F.cosine_similarity(got, expected, dim=-1)
    print(f"{case}: min cosine {float(cosines.min()):.7f}")
    assert bool((cosines >= 0.9999).all()), cosines
    torch.testing.assert_close(got.norm(dim=-1), expected.norm(dim=-1), rtol=1e-4, atol=1e-5)


def write_pipeline(folder: Path, pooling: dict[str, Any], modules: list[str]) -> None:
    (folder / "1_Pooling").mkdir(parents=True, exist_ok=True)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    listed = [{"path": "1_Pooling" if m == "Pooling" else "", "type": f"x.{m}"} for m in modules]
    (folder / "modules.json").write_text(json.dumps(listed))


@pytest.mark.parametrize(
    ("pooling", "expected"),
    [
        ({"pooling_mode_lasttoken": True, "pooling_mode_mean_tokens": False}, VigilPooling.LAST),
        ({"pooling_mode_cls_token": True}, VigilPooling.CLS),
        ({"pooling_mode": "mean"}, VigilPooling.MEAN),
        ({"pooling_mode": ["lasttoken"]}, VigilPooling.LAST),
    ],
)
def test_either_spelling_of_the_pooling_is_read(
    tmp_path: Path, pooling: dict[str, Any], expected: Pooling
) -> None:
    write_pipeline(tmp_path, pooling, ["Transformer", "Pooling"])
    pipeline = read_pipeline(tmp_path, 64)
    assert (pipeline.pooling, pipeline.normalize) == (expected, False)


@pytest.mark.parametrize(
    ("pooling", "modules", "message"),
    [
        ({"pooling_mode": "max"}, ["Transformer", "Pooling"], r"pooling \['max'\] is not"),
        ({"pooling_mode": ["mean", "cls"]}, ["Transformer", "Pooling"], "pooling"),
        ({"pooling_mode_weightedmean_tokens": True}, ["Transformer", "Pooling"], "weightedmean"),
        ({"pooling_mode": "mean"}, ["Transformer", "Pooling", "Dense"], r"modules \['x.Dense'\]"),
        ({"pooling_mode": "mean", "embedding_dimension": 32}, ["Pooling"], "dimension 32"),
    ],
)
def test_what_cannot_be_served_as_the_folder_says_is_refused(
    tmp_path: Path, pooling: dict[str, Any], modules: list[str], message: str
) -> None:
    write_pipeline(tmp_path, pooling, modules)
    with pytest.raises(ValueError, match=message):
        read_pipeline(tmp_path, 64)


def test_the_length_limit_is_read_from_either_file_within_the_positions(tmp_path: Path) -> None:
    config = {"model_type": "qwen2"} | SHAPE | {"num_key_value_heads": 2}  # 128 positions
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 1e30}))
    assert read_max_seq_len(tmp_path) is None  # transformers' "no limit"
    assert read_window(tmp_path, config) == 128
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 96}))
    assert read_window(tmp_path, config) == 96
    (tmp_path / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 80}))
    assert read_window(tmp_path, config) == 80
    roberta = {"model_type": "xlm-roberta"} | SHAPE  # positions from padding_idx + 1 = 1
    (tmp_path / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 512}))
    assert read_window(tmp_path, roberta) == 127
