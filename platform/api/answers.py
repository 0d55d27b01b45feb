"""Whole (non-streamed) answers: a collected generation as OpenAI's chat completion or
text completion, one choice per index.

A chat answer offered tools is read by the version's tool-call parser: calls become
`tool_calls` (the content null when there is no other text) and a choice that stopped
after them finishes with `tool_calls`; one cut by max_tokens keeps `length`. Usage
counts the prompt once, however many choices shared it.
"""

from __future__ import annotations

import time

from vigil.platform.api.logprobs import LegacyWriter, chat_logprobs, joined
from vigil.platform.api.openai_responses import (
    ChatChoice,
    ChatCompletion,
    ChatMessageOut,
    Completion,
    CompletionChoice,
    FinishReasonName,
    FunctionCallOut,
    LegacyLogprobs,
    ToolCallOut,
    Usage,
)
from vigil.platform.gateway.generation import Choice, Collected, FinishReason, Generation
from vigil.platform.gateway.tool_calls import parse_whole

FINISH_REASONS: dict[FinishReason, FinishReasonName] = {
    FinishReason.STOP: "stop",
    FinishReason.LENGTH: "length",
}


def finish_reason(reason: FinishReason, called: bool) -> FinishReasonName | None:
    if called and reason is FinishReason.STOP:
        return "tool_calls"
    return FINISH_REASONS.get(reason)


def usage(num_prompt_tokens: int, num_output_tokens: int) -> Usage:
    return Usage(num_prompt_tokens, num_output_tokens, num_prompt_tokens + num_output_tokens)


def chat_completion(generation: Generation, collected: Collected) -> ChatCompletion:
    choices = [_chat_choice(generation, c) for c in collected.choices]
    return ChatCompletion(
        generation.request_id,
        int(time.time()),
        generation.deployment,
        choices,
        usage(collected.num_prompt_tokens, collected.num_output_tokens),
    )


def _chat_choice(generation: Generation, choice: Choice) -> ChatChoice:
    assert choice.finish is not None
    parser = generation.tool_parser()
    content: str | None = choice.text
    calls: list[ToolCallOut] = []
    if parser is not None:
        parsed = parse_whole(parser, choice.text)
        content = parsed.content
        calls = [ToolCallOut(c.id, FunctionCallOut(c.name, c.arguments)) for c in parsed.calls]
    message = ChatMessageOut("assistant", content, calls or None)
    logprobs = None
    if generation.request.params.logprobs is not None:
        logprobs = chat_logprobs(choice.logprobs, generation.token_bytes)
    reason = finish_reason(choice.finish.reason, bool(calls))
    return ChatChoice(choice.index, message, reason, logprobs)


def completion(generation: Generation, collected: Collected, echo: str | None) -> Completion:
    """`echo`: the prompt's text, written before each choice's, when the request asked."""
    choices = [_completion_choice(generation, c, echo, collected) for c in collected.choices]
    return Completion(
        generation.request_id,
        int(time.time()),
        generation.deployment,
        choices,
        usage(collected.num_prompt_tokens, collected.num_output_tokens),
    )


def _completion_choice(
    generation: Generation, choice: Choice, echo: str | None, collected: Collected
) -> CompletionChoice:
    assert choice.finish is not None
    logprobs: LegacyLogprobs | None = None
    if generation.request.params.logprobs is not None:
        writer = LegacyWriter(generation.token_bytes)
        if echo is not None:
            prompt_ids = generation.request.prompt_ids
            head = writer.echoed_prompt(prompt_ids, collected.prompt_logprobs)
            logprobs = joined(head, writer.tokens(choice.logprobs))
        else:
            logprobs = writer.tokens(choice.logprobs)
    text = choice.text if echo is None else echo + choice.text
    return CompletionChoice(
        choice.index, text, finish_reason(choice.finish.reason, False), logprobs
    )


def echo_text(generation: Generation, prompt: str | list[int]) -> str:
    """The prompt as echoed: its text, or its token ids decoded."""
    return prompt if isinstance(prompt, str) else generation.tokenizer.decode(prompt)
