"""A step's kernels run on the threads its size asks for: small steps on fewer."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from vigil.engine.llm_engine import EngineConfig, LLMEngine
from vigil.engine.loaders.llm import LanguageModel
from vigil.engine.request import GenerationRequest, RequestId, SamplingParams
from vigil.engine.runner import kv_bytes_per_token
from vigil.engine.threads import SMALL_STEP_ROWS, StepThreads


def test_steps_up_to_the_small_size_take_the_small_count() -> None:
    threads = StepThreads(small=1, large=4)
    assert [threads.for_rows(n) for n in (1, SMALL_STEP_ROWS)] == [1, 1]
    assert [threads.for_rows(n) for n in (SMALL_STEP_ROWS + 1, 2048)] == [4, 4]


@pytest.mark.parametrize("small, large", [(0, 2), (1, 0), (-1, -1)])
def test_a_count_below_one_is_refused(small: int, large: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        StepThreads(small, large)


@pytest.fixture
def restore_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.slow
@pytest.mark.usefixtures("restore_threads")
def test_each_step_runs_on_the_threads_of_its_size(smollm2: LanguageModel) -> None:
    seen: list[int] = []
    forward = smollm2.model.forward

    def counting(*args: object) -> torch.Tensor:
        seen.append(torch.get_num_threads())
        return forward(*args)  # type: ignore[arg-type]

    memory = kv_bytes_per_token(smollm2) * 16 * 8
    threads = StepThreads(small=1, large=2)
    engine = LLMEngine(smollm2, EngineConfig(kv_cache_memory_bytes=memory, threads=threads))
    torch.set_num_threads(3)  # neither: the engine must set it for every step
    params = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)
    engine.add_request(GenerationRequest(RequestId("a"), list(range(100, 120)), params))
    smollm2.model.forward = counting  # type: ignore[method-assign]
    try:
        while engine.has_work():
            engine.step()
    finally:
        del smollm2.model.forward
    assert seen == [2, 1, 1]  # a 20-token prefill, then two decodes
