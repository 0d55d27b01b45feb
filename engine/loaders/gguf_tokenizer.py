"""A GGUF file's tokenizer, built with Hugging Face `tokenizers` from the vocabulary in
its metadata, as llama.cpp tokenizes (`tokenizer.ggml.model`):

    gpt2   byte-level BPE: the file's vocabulary and merges, split first as its
           `tokenizer.ggml.pre` names (SmolLM2's digits one by one)
    llama  SentencePiece (Llama 2, Mistral, Gemma, Phi-3): no merges in the file, but
           a score a token. llama.cpp merges, over and over, the adjacent pair whose
           joined text is a token of the highest score; that is BPE whose merges are
           every (left, right) split of each token, ranked by the token's score.
           Spaces are "▁" (U+2581), one put before the text where the file says
           `add_space_prefix` (so "  hi" is "▁▁▁hi", as SentencePiece writes it);
           a character outside the vocabulary is its UTF-8 bytes, tokens "<0xNN>".

Control tokens are special (matched whole in text, skipped when decoding), user-defined
ones are matched whole and kept. BOS (and EOS) are added where the file says
`add_bos_token` (`add_eos_token`); SentencePiece files that say nothing add BOS, as
llama.cpp does.

Gemma's files need two of transformers' own fixes, taken as they are: tokens of only
spaces are stored with real spaces where the text's are "▁", and its merge order is
the order of the vocabulary, not of its scores.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tokenizers import AddedToken, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import Tokenizer as HFTokenizer

from vigil.engine.tokenizer import Tokenizer

Field = Callable[[str, Any], Any]  # (key, default) -> value

_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED = 1, 2, 3, 4  # gguf.TokenType
_SPACE = "\u2581"
TOKENIZER_MODELS = ("gpt2", "llama")


def gguf_tokenizer(field: Field, arch: str) -> Tokenizer:
    kind = field("tokenizer.ggml.model", None)
    if kind not in TOKENIZER_MODELS:
        raise ValueError(f"tokenizer {kind!r} is not supported ({', '.join(TOKENIZER_MODELS)})")
    tokens: list[str] = list(field("tokenizer.ggml.tokens", None))
    types: list[int] = list(field("tokenizer.ggml.token_type", None) or [_NORMAL] * len(tokens))
    if kind == "gpt2":
        backend = _byte_level(field, tokens)
        add_bos_default = False
    else:
        backend = _sentencepiece(field, arch, tokens, types)
        add_bos_default = True
    kinds = list(zip(tokens, types, strict=True))
    control = [AddedToken(t, special=True, normalized=False) for t, k in kinds if k == _CONTROL]
    backend.add_special_tokens(control)
    backend.add_tokens([AddedToken(t, normalized=False) for t, k in kinds if k == _USER_DEFINED])
    bos = field("tokenizer.ggml.bos_token_id", None)
    eos = field("tokenizer.ggml.eos_token_id", None)
    bos_token = tokens[int(bos)] if bos is not None else None
    eos_token = tokens[int(eos)] if eos is not None else None
    add_bos = bool(field("tokenizer.ggml.add_bos_token", add_bos_default)) and bos is not None
    add_eos = bool(field("tokenizer.ggml.add_eos_token", False)) and eos is not None
    if add_bos or add_eos:
        ends = (int(bos) if add_bos else None, int(eos) if add_eos else None)
        backend.post_processor = _around(*ends, tokens)
    eos_ids = {int(eos)} if eos is not None else set()
    eot = field("tokenizer.ggml.eot_token_id", None)
    if eot is not None:
        eos_ids.add(int(eot))
    return Tokenizer(
        backend,
        eos_token_ids=frozenset(eos_ids),
        chat_template=field("tokenizer.chat_template", None),
        bos_token=bos_token,
        eos_token=eos_token,
        add_special_tokens=add_bos or add_eos,
    )


def _byte_level(field: Field, tokens: list[str]) -> HFTokenizer:
    merges = [tuple(m.split(" ", 1)) for m in field("tokenizer.ggml.merges", None)]
    vocab = {tok: i for i, tok in enumerate(tokens)}
    backend = HFTokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=False))
    pre: list[pre_tokenizers.PreTokenizer] = []
    if field("tokenizer.ggml.pre", None) in ("smollm", "starcoder", "refact"):
        pre.append(pre_tokenizers.Digits(individual_digits=True))
    pre.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
    backend.pre_tokenizer = pre_tokenizers.Sequence(pre)
    backend.decoder = decoders.ByteLevel()
    return backend


def _sentencepiece(field: Field, arch: str, tokens: list[str], types: list[int]) -> HFTokenizer:
    scores: list[float] = list(field("tokenizer.ggml.scores", None) or [0.0] * len(tokens))
    if arch in ("gemma2", "gemma3"):
        tokens = [_SPACE * len(t) if t and not t.strip(" ") else t for t in tokens]
        scores = [-float(i) for i in range(len(tokens))]
    vocab = {tok: i for i, tok in enumerate(tokens)}
    mergeable = {
        tok: (score, i)
        for i, (tok, score, kind) in enumerate(zip(tokens, scores, types, strict=True))
        if kind in (_NORMAL, _USER_DEFINED)
    }
    ranked: list[tuple[float, int, int, str, str]] = []
    for tok, (score, i) in mergeable.items():
        for cut in range(1, len(tok)):
            left, right = tok[:cut], tok[cut:]
            if left in vocab and right in vocab:
                ranked.append((-score, i, cut, left, right))
    merges = [(left, right) for *_, left, right in sorted(ranked)]
    unk = field("tokenizer.ggml.unknown_token_id", None)
    backend = HFTokenizer(
        models.BPE(
            vocab=vocab,
            merges=merges,
            unk_token=tokens[int(unk)] if unk is not None else None,
            fuse_unk=True,
            byte_fallback=True,
        )
    )
    space: list[normalizers.Normalizer] = [normalizers.Replace(" ", _SPACE)]
    strip: list[decoders.Decoder] = []
    if field("tokenizer.ggml.add_space_prefix", True):
        space.insert(0, normalizers.Prepend(_SPACE))
        strip.append(decoders.Strip(" ", 1, 0))  # the space the prefix put there
    backend.normalizer = normalizers.Sequence(space)
    backend.decoder = decoders.Sequence(
        [decoders.Replace(_SPACE, " "), decoders.ByteFallback(), decoders.Fuse(), *strip]
    )
    return backend


def _around(bos: int | None, eos: int | None, tokens: list[str]) -> processors.TemplateProcessing:
    """BOS before and EOS after each text, where the file asks for them."""
    ends = [(tokens[i], i) for i in (bos, eos) if i is not None]
    first = [tokens[bos]] if bos is not None else []
    last = [tokens[eos]] if eos is not None else []
    return processors.TemplateProcessing(
        single=" ".join([*first, "$A", *last]), special_tokens=ends
    )
