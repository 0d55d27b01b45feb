"""Records the step timings that tests/unit/platform/test_load_model.py holds the load
model to: the bundled chat model in float32 on one CPU thread, an engine of 8 batch
slots, its calibration, a request alone, and a cold burst of 24 requests at once (each
request's time to first token, and every step of the burst).

    .venv/bin/python tests/unit/platform/data/record_steps.py   # writes steps.json here
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict
from pathlib import Path

import torch

from vigil.engine.bundled import SMOLLM2, bundled_source
from vigil.engine.calibrate import calibrate
from vigil.engine.llm_engine import EngineConfig, LLMEngine
from vigil.engine.loaders.llm import load_language_model
from vigil.engine.request import GenerationRequest, RequestClock, RequestId, SamplingParams
from vigil.engine.threads import StepThreads

MAX_NUM_SEQS = 8
MAX_NUM_BATCHED_TOKENS = 2048
BURST = 24
OUTPUT_TOKENS = 16


def main() -> None:
    torch.set_num_threads(1)
    lm = load_language_model(bundled_source(SMOLLM2), torch.device("cpu"), torch.float32)
    config = EngineConfig(
        kv_cache_memory_bytes=128 << 20,
        max_num_seqs=MAX_NUM_SEQS,
        max_num_batched_tokens=MAX_NUM_BATCHED_TOKENS,
        threads=StepThreads(1, 1),
    )
    engine = LLMEngine(lm, config)
    calibration = calibrate(engine)
    rng = random.Random(7)

    def request(i: int, num_prompt: int) -> GenerationRequest:
        ids = [rng.randrange(100, lm.config.vocab_size) for _ in range(num_prompt)]
        params = SamplingParams(max_tokens=OUTPUT_TOKENS, ignore_eos=True)
        return GenerationRequest(RequestId(f"r{i}"), ids, params, clock=RequestClock(0.0))

    def run(requests: list[GenerationRequest]) -> tuple[list[float], list[dict[str, float]]]:
        t0 = time.monotonic()
        for r in requests:
            r.clock.arrival_ts = t0
            engine.add_request(r)
        steps: list[dict[str, float]] = []
        while engine.has_work():
            engine.step()
            last = engine.stats().last_step
            assert last is not None
            steps.append({"at_s": time.monotonic() - t0, **asdict(last)})
        return [(r.clock.first_token_ts or 0.0) - t0 for r in requests], steps

    alone = request(0, 40)
    (alone_ttft,), _ = run([alone])
    burst = [request(i + 1, rng.randrange(30, 60)) for i in range(BURST)]
    ttfts, steps = run(burst)
    out = {
        "model": f"{SMOLLM2} float32, 1 thread",
        "max_num_seqs": MAX_NUM_SEQS,
        "max_num_batched_tokens": MAX_NUM_BATCHED_TOKENS,
        "calibration": [asdict(s) for s in calibration],
        "alone": {
            "num_prompt_tokens": 40,
            "num_output_tokens": OUTPUT_TOKENS,
            "ttft_s": alone_ttft,
        },
        "burst": {
            "requests": [
                {
                    "num_prompt_tokens": len(r.prompt_ids),
                    "num_output_tokens": OUTPUT_TOKENS,
                    "ttft_s": t,
                }
                for r, t in zip(burst, ttfts, strict=True)
            ],
            "steps": steps,
        },
    }
    path = Path(__file__).with_name("steps.json")
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(
        f"wrote {path}: alone {alone_ttft:.3f} s, burst TTFTs {min(ttfts):.2f}-{max(ttfts):.2f} s"
    )


if __name__ == "__main__":
    main()
