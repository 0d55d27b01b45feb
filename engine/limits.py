"""How many tokens one request may hold: one rule, used alike by the engine, the worker
and the gateway (which checks it before a request queues, from the limits each worker
reports).

A running request holds its prompt and up to max_tokens outputs in the KV cache at
once, so both must fit its context window: the smaller of the model's position limit
and the KV cache's whole capacity. A deployment may cap either part tighter.
"""

from __future__ import annotations

from dataclasses import dataclass


class RequestRejected(ValueError):
    """A request that can never be served as asked: bad input, not back-pressure.
    `param` names the part to change ("prompt", "max_tokens", "input[3]")."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True, slots=True)
class ContextLimit:
    context_tokens: int  # prompt + output tokens one request may hold
    max_prompt_tokens: int | None = None  # a deployment's tighter cap on the prompt
    max_output_tokens: int | None = None  # a deployment's tighter cap on max_tokens


def fit_request(num_prompt_tokens: int, max_tokens: int | None, limit: ContextLimit) -> int:
    """The max_tokens the request runs with (when it asks for none: all the room its
    prompt leaves, within the deployment's cap), or RequestRejected saying what to cut."""
    n, context = num_prompt_tokens, limit.context_tokens
    if n == 0:
        raise RequestRejected("The prompt is empty.", "prompt")
    prompt_cap = context - 1  # room for at least one output token
    if limit.max_prompt_tokens is not None and limit.max_prompt_tokens < prompt_cap:
        prompt_cap, where = limit.max_prompt_tokens, "this deployment's prompt limit"
    else:
        where = "this model's maximum context length"
    if n > prompt_cap:
        raise RequestRejected(
            f"The prompt has {n} tokens, over {where} of {prompt_cap} tokens; shorten it.",
            "prompt",
        )
    room = context - n
    cap = room
    limit_name = f"the {context}-token context window minus the prompt"
    if limit.max_output_tokens is not None and limit.max_output_tokens < room:
        cap, limit_name = limit.max_output_tokens, "this deployment's max_tokens limit"
    if max_tokens is None:
        return cap
    if max_tokens > cap:
        raise RequestRejected(
            f"max_tokens is {max_tokens}, over {limit_name}: at most {cap} for this "
            f"{n}-token prompt (context window {context} tokens). Lower max_tokens.",
            "max_tokens",
        )
    return max_tokens


def check_embedding_inputs(num_tokens: list[int], max_tokens: int) -> None:
    """Each text to embed must fit the encoder's window; the first one over is named."""
    for i, n in enumerate(num_tokens):
        if n > max_tokens:
            raise RequestRejected(
                f"input[{i}] has {n} tokens, more than this model's limit of {max_tokens}. "
                "Shorten or split the text.",
                f"input[{i}]",
            )
