"""Execute one StepPlan: a single forward pass for the whole batch, then sampling.

Owns the KV cache memory: one tensor (layers, 2, num_blocks * block_size,
kv_heads, head_dim), allocated once; a block's slots are
`block_id * block_size + [0, block_size)`.

Logits are computed for the last row of each sampling sequence only, and, for a
sequence that asks for its prompt's logprobs (SamplingParams.prompt_logprobs), for the
rows of its prompt as they are prefilled: nobody else pays for them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field

import torch

from vigil.engine.grammar import CompiledGrammar, GrammarMatcher
from vigil.engine.grammar_masks import GrammarMasks
from vigil.engine.kernels import paged_attention_ext
from vigil.engine.loaders.llm import LanguageModel
from vigil.engine.model.attention import AttentionMetadata, DecodeKernel, PrefillSpan
from vigil.engine.request import RequestId, SampledLogprobs, TokenLogprob
from vigil.engine.sampler import GrammarRows, make_generator, sample
from vigil.engine.scheduler import BlockCopy, ScheduledSeq, StepPlan
from vigil.engine.sequence import Sequence
from vigil.engine.threads import StepThreads, use_threads

# Prompt positions whose logits are held at once when a prompt's logprobs are asked for:
# 256 rows of the bundled model's 49,152-token vocabulary are 50 MB of float32.
PROMPT_LOGITS_ROWS = 256


@dataclass(slots=True)
class StepResult:
    sampled: dict[RequestId, int]
    prepare_s: float
    forward_s: float
    sample_s: float  # grammar masks and matcher updates included
    logprobs: dict[RequestId, SampledLogprobs] = field(default_factory=dict)
    # Constrained sequences whose grammar is complete after this step's token.
    grammar_done: set[RequestId] = field(default_factory=set)


def kv_bytes_per_token(lm: LanguageModel) -> int:
    cfg = lm.config
    itemsize = torch.empty((), dtype=lm.dtype).element_size()
    return 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * itemsize


class ModelRunner:
    def __init__(
        self,
        lm: LanguageModel,
        num_blocks: int,
        block_size: int,
        native_attention: bool = True,
        threads: StepThreads | None = None,
    ) -> None:
        cfg = lm.config
        self.lm = lm
        self.block_size = block_size
        self.device = lm.device
        self.threads = threads if self.device.type == "cpu" else None
        self.kv_caches = torch.zeros(
            (cfg.num_layers, 2, num_blocks * block_size, cfg.num_kv_heads, cfg.head_dim),
            dtype=lm.dtype,
            device=lm.device,
        )
        self._generators: dict[RequestId, torch.Generator] = {}
        self._matchers: dict[RequestId, GrammarMatcher] = {}
        # Per sequence that asks: position p's record scores prompt token p + 1.
        self._prompt_logprobs: dict[RequestId, list[SampledLogprobs]] = {}
        self._masks = GrammarMasks(cfg.vocab_size)
        self._eos_ids = sorted(lm.tokenizer.eos_token_ids)
        self._decode_kernel: DecodeKernel | None = None
        if native_attention and self.device.type == "cpu" and lm.dtype == torch.float32:
            ext = paged_attention_ext()
            self._decode_kernel = ext.paged_decode_attention if ext is not None else None

    def add_request(
        self, request_id: RequestId, seed: int | None, grammar: CompiledGrammar | None = None
    ) -> None:
        self._generators[request_id] = make_generator(seed, self.device)
        if grammar is not None:
            self._matchers[request_id] = grammar.matcher()

    def remove_request(self, request_id: RequestId) -> None:
        self._generators.pop(request_id, None)
        self._matchers.pop(request_id, None)
        self._prompt_logprobs.pop(request_id, None)

    def take_prompt_logprobs(self, request_id: RequestId) -> list[SampledLogprobs]:
        """The prompt's logprobs, once its prefill is done (then they are forgotten)."""
        return self._prompt_logprobs.pop(request_id, [])

    @torch.inference_mode()
    def copy_tokens(self, copies: Seq[BlockCopy]) -> None:
        """Partial prefix hits: each copy's first tokens' K/V, every layer, src -> dst."""
        bs = self.block_size
        for c in copies:
            src, dst = c.src * bs, c.dst * bs
            self.kv_caches[:, :, dst : dst + c.num_tokens] = self.kv_caches[
                :, :, src : src + c.num_tokens
            ]

    @torch.inference_mode()
    def execute(self, plan: StepPlan) -> StepResult:
        t0 = time.perf_counter()
        decodes = [s for s in plan.scheduled if _is_decode(s)]
        prefills = [s for s in plan.scheduled if not _is_decode(s)]
        ordered = decodes + prefills
        ids, positions, slots = self._flatten(ordered)
        meta = AttentionMetadata(
            slot_mapping=self._tensor(slots),
            num_decodes=len(decodes),
            decode_slots=None,
            decode_lens=None,
            decode_mask=None,
            prefills=[],
            decode_kernel=self._decode_kernel,
        )
        if decodes:
            self._set_decode_context(meta, [s.seq for s in decodes])
        row = len(decodes)
        for item in prefills:
            num_cached = item.seq.num_computed_tokens
            context = None
            if num_cached > 0:
                context = self._slots_for(item.seq, num_cached + item.num_new_tokens)
            meta.prefills.append(PrefillSpan(row, item.num_new_tokens, num_cached, context))
            row += item.num_new_tokens
        if self.threads is not None:
            use_threads(self.threads.for_rows(len(ids)))
        t1 = time.perf_counter()
        hidden = self.lm.model(self._tensor(ids), self._tensor(positions), self.kv_caches, meta)
        for span, item in zip(meta.prefills, prefills, strict=True):
            if item.seq.request.params.prompt_logprobs is not None:
                self._score_prompt(hidden, span.start, item)
        # Only the last row of each sampling sequence needs logits.
        sample_rows, sampling = [], []
        end = 0
        for item in ordered:
            end += item.num_new_tokens
            if item.samples:
                sample_rows.append(end - 1)
                sampling.append(item.seq)
        logits = self.lm.model.compute_logits(hidden[self._tensor(sample_rows)])
        self._ban_early_eos(logits, sampling)
        t2 = time.perf_counter()
        grammar = self._grammar_rows(sampling)
        out = sample(
            logits,
            [s.request.params for s in sampling],
            [self._generators.get(s.request_id) for s in sampling],
            grammar,
        )
        result = StepResult(
            {s.request_id: tok for s, tok in zip(sampling, out.token_ids, strict=True)},
            t1 - t0,
            t2 - t1,
            0.0,
        )
        for s, lp in zip(sampling, out.logprobs, strict=True):
            if lp is not None:
                result.logprobs[s.request_id] = lp
        if grammar is not None:
            for row, matcher in zip(grammar.rows, grammar.matchers, strict=True):
                matcher.advance(out.token_ids[row])
                if matcher.is_stopped:
                    result.grammar_done.add(sampling[row].request_id)
        result.sample_s = time.perf_counter() - t2
        return result

    def _score_prompt(self, hidden: torch.Tensor, row: int, item: ScheduledSeq) -> None:
        """Logprobs of the prompt tokens this chunk predicts: hidden row `row` holds
        position seq.num_computed_tokens, whose logits score the prompt's next token.
        A preempted sequence recomputes its prompt; positions already scored are skipped."""
        seq = item.seq
        prompt = seq.request.prompt_ids
        num_top = seq.request.params.prompt_logprobs
        assert num_top is not None
        scored = self._prompt_logprobs.setdefault(seq.request_id, [])
        start = seq.num_computed_tokens
        assert len(scored) >= start, "a prompt scored with a gap (a prefix-cache hit?)"
        end = min(start + item.num_new_tokens, len(prompt) - 1)
        for a in range(len(scored), end, PROMPT_LOGITS_ROWS):
            b = min(a + PROMPT_LOGITS_ROWS, end)
            rows = hidden[row + a - start : row + b - start]
            lp = self.lm.model.compute_logits(rows).float().log_softmax(-1)  # (b - a, V)
            targets = self._tensor(prompt[a + 1 : b + 1])
            chosen = lp.gather(1, targets.unsqueeze(1)).squeeze(1).tolist()
            tops: list[tuple[TokenLogprob, ...]] = [()] * (b - a)
            if num_top > 0:
                values, top_ids = lp.topk(num_top, dim=-1)
                tops = [
                    tuple(TokenLogprob(t, v) for v, t in zip(vs, ts, strict=True))
                    for vs, ts in zip(values.tolist(), top_ids.tolist(), strict=True)
                ]
            for j in range(b - a):
                scored.append(SampledLogprobs(prompt[a + 1 + j], chosen[j], tops[j]))

    def _grammar_rows(self, sampling: list[Sequence]) -> GrammarRows | None:
        if not self._matchers:
            return None  # no constrained sequence in the engine: no work at all
        rows, matchers = [], []
        for i, s in enumerate(sampling):
            matcher = self._matchers.get(s.request_id)
            if matcher is not None:
                # Preemption keeps output_ids and the matcher together: they must agree.
                assert matcher.num_tokens == len(s.output_ids), (
                    f"{s.request_id}: matcher at {matcher.num_tokens} tokens, "
                    f"sequence at {len(s.output_ids)}"
                )
                rows.append(i)
                matchers.append(matcher)
        return GrammarRows(self._masks, rows, matchers) if rows else None

    def _ban_early_eos(self, logits: torch.Tensor, sampling: list[Sequence]) -> None:
        """Rows still below their min_tokens cannot pick an end-of-sequence token
        (constrained rows excepted: their grammar says when they may end)."""
        rows = [
            i
            for i, s in enumerate(sampling)
            if len(s.output_ids) < s.request.params.min_tokens
            and s.request.params.constraint is None
        ]
        if rows and self._eos_ids:
            logits[torch.tensor(rows).unsqueeze(1), torch.tensor(self._eos_ids)] = float("-inf")

    def _flatten(self, items: list[ScheduledSeq]) -> tuple[list[int], list[int], list[int]]:
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        bs = self.block_size
        for item in items:
            seq = item.seq
            start = seq.num_computed_tokens
            for pos in range(start, start + item.num_new_tokens):
                ids.append(seq.token_at(pos))
                positions.append(pos)
                slots.append(seq.block_ids[pos // bs] * bs + pos % bs)
        return ids, positions, slots

    def _set_decode_context(self, meta: AttentionMetadata, seqs: list[Sequence]) -> None:
        """(B, Lmax) slots of every cached position plus the new one, their real
        lengths, and for the PyTorch path the (B, 1, 1, Lmax) mask of real entries."""
        bs = self.block_size
        lens = self._tensor([s.num_computed_tokens + 1 for s in seqs])
        max_blocks = max(len(s.block_ids) for s in seqs)
        table = self._tensor([s.block_ids + [0] * (max_blocks - len(s.block_ids)) for s in seqs])
        pos = torch.arange(int(lens.max()), device=self.device)
        meta.decode_slots = table[:, pos // bs] * bs + pos % bs
        meta.decode_lens = lens
        if self._decode_kernel is None:
            meta.decode_mask = (pos.unsqueeze(0) < lens.unsqueeze(1))[:, None, None, :]

    def _slots_for(self, seq: Sequence, num_positions: int) -> torch.Tensor:
        bs = self.block_size
        pos = torch.arange(num_positions, device=self.device)
        table = self._tensor(seq.block_ids)
        return table[pos // bs] * bs + pos % bs

    def _tensor(self, values: Seq[int] | Seq[Seq[int]]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=self.device)


def _is_decode(item: ScheduledSeq) -> bool:
    return item.num_new_tokens == 1 and item.seq.num_computed_tokens > 0
