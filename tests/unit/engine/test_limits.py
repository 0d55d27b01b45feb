"""The context rule: what a request may hold, and which part to cut when it is over."""

from __future__ import annotations

import pytest

from vigil.engine.limits import (
    ContextLimit,
    RequestRejected,
    check_embedding_inputs,
    fit_request,
)


def test_a_request_without_max_tokens_gets_all_the_room_its_prompt_leaves() -> None:
    assert fit_request(90, None, ContextLimit(100)) == 10
    assert fit_request(90, 4, ContextLimit(100)) == 4


def test_prompt_and_max_tokens_may_fill_the_window_exactly() -> None:
    assert fit_request(99, 1, ContextLimit(100)) == 1
    with pytest.raises(RequestRejected) as caught:
        fit_request(90, 11, ContextLimit(100))
    assert caught.value.param == "max_tokens"
    assert "at most 10 for this 90-token prompt (context window 100 tokens)" in str(caught.value)


def test_a_prompt_that_leaves_no_room_for_one_output_is_the_prompts_fault() -> None:
    with pytest.raises(RequestRejected) as caught:
        fit_request(100, None, ContextLimit(100))
    assert caught.value.param == "prompt"
    assert "maximum context length of 99 tokens" in str(caught.value)


def test_an_empty_prompt_is_rejected() -> None:
    with pytest.raises(RequestRejected, match="empty") as caught:
        fit_request(0, 5, ContextLimit(100))
    assert caught.value.param == "prompt"


def test_a_deployment_cap_binds_only_when_tighter_and_says_so() -> None:
    capped = ContextLimit(100, max_prompt_tokens=64, max_output_tokens=16)
    assert fit_request(64, None, capped) == 16
    with pytest.raises(RequestRejected, match="this deployment's prompt limit of 64") as caught:
        fit_request(65, None, capped)
    assert caught.value.param == "prompt"
    with pytest.raises(RequestRejected, match="this deployment's max_tokens limit: at most 16"):
        fit_request(10, 17, capped)
    # Looser than the window: the window decides, and the message names the window.
    loose = ContextLimit(100, max_prompt_tokens=500, max_output_tokens=500)
    assert fit_request(95, None, loose) == 5
    with pytest.raises(RequestRejected, match="maximum context length of 99"):
        fit_request(100, None, loose)


def test_the_first_text_over_the_encoders_window_is_named() -> None:
    check_embedding_inputs([3, 256, 2], 256)
    with pytest.raises(RequestRejected, match="input\\[1\\] has 257 tokens") as caught:
        check_embedding_inputs([3, 257, 900], 256)
    assert caught.value.param == "input[1]"
