"""An engine's self-profile: a few synthetic steps run when a model is loaded, before the
engine takes traffic, so that what its steps cost is known from the first request on
(admission would otherwise have to admit a first burst blind, and learn from it).

    warm-up   a prompt, a decode, a second prompt beside it, a decode: native kernels
              built, caches touched; not measured
    prompts   PROMPT_LENGTHS prefilled alone (capped by the step's token budget and the
              context): what a prompt token costs
    staircase batches of 1, 2, 4, ... sequences up to max_num_seqs: each size reached by
              a step that prefills the newcomers' short prompts beside the others'
              decodes, then DECODE_STEPS decode-only steps; at the largest, a prompt of
              PROBE_TOKENS beside all the batch but one. It stops early at the first size whose
              decode step takes over MAX_DECODE_STEP_S (a CPU at batch 256), or once the
              calibration has taken BUDGET_S: the profile extrapolates beyond the largest
              size measured

Something else busy on the machine only makes a step slower, and one step of ten times
its cost would bend a fit of a dozen points: so every step that prefills is run twice
and the faster kept, and the profile takes the fastest of each batch size's decode steps.
Prompts are random token ids, so the prefix cache finds nothing; the engine is reset
afterwards (empty cache, counters at zero), so the calibration leaves no trace in what
the engine reports. On the bundled chat model in float32 it takes about 5 s at
max_num_seqs 32, 1.5 s at 4 (one CPU thread for small steps, two for large).
"""

from __future__ import annotations

import random
import time

from vigil.engine.llm_engine import LLMEngine
from vigil.engine.request import GenerationRequest, RequestClock, RequestId, SamplingParams
from vigil.engine.stats import StepStats

DECODE_STEPS = 2
MAX_DECODE_STEP_S = 0.5
BUDGET_S = 6.0
STAIR_PROMPT_TOKENS = 4
WARM_PROMPT_TOKENS = 16
PROMPT_LENGTHS = (16, 128)
PROBE_TOKENS = 64
FIRST_TOKEN_ID = 100  # random prompts avoid the control tokens at the start of a vocabulary


class _Calibration:
    def __init__(self, engine: LLMEngine, seed: int) -> None:
        self.engine = engine
        self.rng = random.Random(seed)
        self.request_ids: list[RequestId] = []
        self.steps: list[StepStats] = []
        self.max_tokens = max(1, engine.context_tokens // 2)

    def add(self, num_prompt_tokens: int, max_tokens: int | None = None) -> RequestId:
        rid = RequestId(f"calibrate-{len(self.request_ids)}")
        self.request_ids.append(rid)
        vocab = self.engine.lm.config.vocab_size
        low = FIRST_TOKEN_ID if vocab > 2 * FIRST_TOKEN_ID else 0
        ids = [self.rng.randrange(low, vocab) for _ in range(num_prompt_tokens)]
        params = SamplingParams(max_tokens=max_tokens or self.max_tokens, ignore_eos=True)
        request = GenerationRequest(rid, ids, params, clock=RequestClock(0.0))
        self.engine.add_request(request)
        return rid

    def step(self, measured: bool = True) -> StepStats:
        self.engine.step()
        stats = self.engine.stats().last_step
        assert stats is not None, "a calibration step scheduled nothing"
        if measured:
            self.steps.append(stats)
        return stats

    def twice(self, prompts: list[int], max_tokens: int | None = None, keep: bool = False) -> None:
        """A step that prefills new prompts of these lengths beside what runs, run twice
        (the first newcomers aborted; the second's stay if `keep`), the faster kept."""
        runs = []
        for i in range(2):
            added = [self.add(n, max_tokens) for n in prompts]
            runs.append(self.step(measured=False))
            if i == 0 or not keep:
                for rid in added:
                    self.engine.abort_request(rid)
        self.steps.append(min(runs, key=lambda s: s.total_s))

    def abort_all(self) -> None:
        for rid in self.request_ids:
            self.engine.abort_request(rid)  # nothing for one that has finished


def calibrate(engine: LLMEngine, seed: int = 0) -> list[StepStats]:
    """The measured steps (warm-up excluded); the engine is reset afterwards."""
    assert not engine.has_work(), "calibrate a new engine, before it takes requests"
    cal = _Calibration(engine, seed)
    budget = engine.config.max_num_batched_tokens
    context = engine.context_tokens
    t0 = time.monotonic()
    try:
        # Warm-up.
        warm = min(WARM_PROMPT_TOKENS, context - 2)
        cal.add(warm)
        cal.step(measured=False)
        cal.step(measured=False)
        cal.add(warm)
        cal.step(measured=False)
        cal.step(measured=False)
        cal.abort_all()
        # Prompts alone.
        for length in sorted({min(n, budget, context - 1) for n in PROMPT_LENGTHS}):
            cal.twice([length], max_tokens=1)
        # The staircase.
        size, running = 1, 0
        stair = min(STAIR_PROMPT_TOKENS, context - 2)
        while running < engine.config.max_num_seqs:
            size = min(size, engine.config.max_num_seqs)
            new = size - running
            if running + new * stair > budget:
                break  # the newcomers' prompts and the decodes would not fit one step
            cal.twice([stair] * new, keep=True)
            running = size
            decode = [cal.step() for _ in range(DECODE_STEPS)]
            if max(s.total_s for s in decode) > MAX_DECODE_STEP_S:
                break
            if time.monotonic() - t0 > BUDGET_S:
                break
            size *= 2
        if running:  # a slot for the probe: one of the batch leaves
            cal.engine.abort_request(cal.request_ids[-1])
        probe = min(PROBE_TOKENS, budget - running, context - 1)
        if running and probe > 1:
            cal.twice([probe], max_tokens=1)
    finally:
        cal.abort_all()
        engine.reset()
    return cal.steps
