"""`vigil serve MODEL ...` with models made by the test: one real server, started with a
tiny random checkpoint of each decoder family (Hugging Face folders, each served as a
deployment named after its folder), a Q8_0 GGUF written from one of them (named after
the file), and a sentence-transformers folder given as NAME=PATH; no --quantization, so
`auto`, the default.

Each family's greedy tokens through /v1/completions equal transformers' own on the same
checkpoint; a chat is rendered with the model's own template; the GGUF runs int8 under
the default `--quantization auto` and says so on /v1/models and in the log; the
embedder's vectors equal sentence-transformers'."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import httpx
import openai
import pytest
import torch
import transformers
from sentence_transformers import SentenceTransformer
from tiny_checkpoints import CASES, VOCAB, save_tiny
from tiny_gguf import write_gguf
from tokenizers import Tokenizer as HFTokenizer
from unit.engine.test_sentence_embedders import TEXTS, save_sentence_transformer

pytestmark = pytest.mark.slow  # one server loading nine models: tens of seconds

FAMILIES = ("llama-rope-llama3", "mistral-window", "qwen2", "qwen3", "gemma2", "gemma3", "phi3")
NUM_TOKENS = 8
# A template of the model's own, in its tokenizer_config.json: words a chat without it
# would not have, around each message.
CHAT_TEMPLATE = (
    "{% for m in messages %}w7 {{ m['content'] }} w8 {% endfor %}"
    "{% if add_generation_prompt %}w9{% endif %}"
)


@dataclass
class Served:
    base_url: str
    log_path: Path
    folders: dict[str, Path]
    references: dict[str, transformers.PreTrainedModel]
    embedder: SentenceTransformer


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, launch_vigil: Any) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("own-models")
    folders = {case: root / case for case in FAMILIES}
    references = {case: save_tiny(folders[case], *CASES[case]) for case in FAMILIES}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": CHAT_TEMPLATE}
    (folders["qwen2"] / "tokenizer_config.json").write_text(json.dumps(config))
    q8 = root / "tiny-qwen3.q8_0.gguf"
    write_gguf(q8, references["qwen3"], lambda name: gguf.GGMLQuantizationType.Q8_0)
    embedder = save_sentence_transformer(root / "bert", "bert-mean-unnormalized")
    models = [*map(str, folders.values()), str(q8), f"embedder={root / 'bert' / 'st'}"]
    data_dir = tmp_path_factory.mktemp("vigil-data")
    with launch_vigil(data_dir, *models) as server:
        yield Served(server.base_url, server.log_path, folders, references, embedder)


@torch.inference_mode()
def greedy(model: transformers.PreTrainedModel, prompt: list[int], num: int) -> list[int]:
    tokens = list(prompt)
    for _ in range(num):
        tokens.append(int(model(torch.tensor([tokens])).logits[0, -1].argmax()))
    return tokens[len(prompt) :]


def words(text: str) -> str:
    """The word tokenizer's text without its spacing: 'w5w17...' says the ids exactly."""
    return "".join(text.split())


@pytest.mark.parametrize("case", FAMILIES)
def test_each_family_answers_with_transformers_greedy_tokens(served: Served, case: str) -> None:
    g = torch.Generator().manual_seed(FAMILIES.index(case))
    prompt = torch.randint(3, VOCAB, (11,), generator=g).tolist()
    body = {
        "model": case,
        "prompt": prompt,
        "max_tokens": NUM_TOKENS,
        "temperature": 0,
        "ignore_eos": True,
    }
    response = httpx.post(f"{served.base_url}/v1/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["usage"]["completion_tokens"] == NUM_TOKENS
    expected = greedy(served.references[case], prompt, NUM_TOKENS)
    tokenizer = HFTokenizer.from_file(str(served.folders[case] / "tokenizer.json"))
    assert words(answer["choices"][0]["text"]) == words(tokenizer.decode(expected))


def test_a_chat_is_rendered_with_the_models_own_template(served: Served) -> None:
    messages = [{"role": "user", "content": "w10 w11 w12"}]
    body = {
        "model": "qwen2",
        "messages": messages,
        "max_tokens": NUM_TOKENS,
        "temperature": 0,
        "ignore_eos": True,
    }
    response = httpx.post(f"{served.base_url}/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    tokenizer = transformers.AutoTokenizer.from_pretrained(served.folders["qwen2"])
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert prompt.split() == ["w7", "w10", "w11", "w12", "w8", "w9"]
    words_only = HFTokenizer.from_file(str(served.folders["qwen2"] / "tokenizer.json"))
    ids = words_only.encode(prompt).ids
    assert response.json()["usage"]["prompt_tokens"] == len(ids) == 6
    expected = words_only.decode(greedy(served.references["qwen2"], ids, NUM_TOKENS))
    assert words(response.json()["choices"][0]["message"]["content"]) == words(expected)


def test_a_gguf_is_named_after_its_file_and_runs_as_its_weights_say(served: Served) -> None:
    name = "tiny-qwen3.q8_0"
    body = {"model": name, "prompt": [5, 6, 7], "max_tokens": NUM_TOKENS, "ignore_eos": True}
    response = httpx.post(f"{served.base_url}/v1/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["completion_tokens"] == NUM_TOKENS
    card = httpx.get(f"{served.base_url}/v1/models/{name}", timeout=10).json()
    precision = card["vigil"]["precision"]
    assert (precision["runs_as"], precision["quantization"]) == ("int8", "int8")
    assert "Q8_0" in precision["reason"]
    assert f"{name}@sha256-" in served.log_path.read_text()
    assert "running as int8 (auto:" in served.log_path.read_text()


def test_models_list_every_deployment_with_its_precision_in_the_openai_shape(
    served: Served,
) -> None:
    client = openai.OpenAI(base_url=f"{served.base_url}/v1", api_key="unused")
    cards = {card.id: card for card in client.models.list()}
    assert set(cards) == {*FAMILIES, "tiny-qwen3.q8_0", "embedder"}
    for case in FAMILIES:
        precision = (cards[case].model_extra or {})["vigil"]["precision"]
        assert precision["runs_as"] == "float32"
        assert precision["reason"] == "auto: float weights run as float32 on CPU"


def test_an_embedder_folder_given_as_name_and_path_embeds_as_sentence_transformers(
    served: Served,
) -> None:
    texts = TEXTS[:4]
    body = {"model": "embedder", "input": texts}
    response = httpx.post(f"{served.base_url}/v1/embeddings", json=body, timeout=60)
    assert response.status_code == 200, response.text
    ours = torch.tensor([item["embedding"] for item in response.json()["data"]])
    reference = torch.from_numpy(served.embedder.encode(texts))
    cosine = torch.nn.functional.cosine_similarity(ours, reference.float())
    assert bool((cosine >= 0.9999).all()), cosine
