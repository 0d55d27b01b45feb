"""The prompt step: a chat offered tools is rendered by the model's own template when it
has a tools section, else by the default rendering; n choices must fit the KV cache
they share."""

from __future__ import annotations

import pytest

from vigil.engine.request import RequestId
from vigil.engine.tokenizer import ChatMessage, Tokenizer, ToolCall
from vigil.platform.errors import InvalidRequest
from vigil.platform.gateway.params import ChatPrompt, FunctionTool, GenerationParams
from vigil.platform.gateway.prompt import check_prompt_size, fit_choices, render_chat
from vigil.platform.gateway.tool_formats import ToolFormat

TOOLS = (FunctionTool("get_weather", "Weather", {"type": "object"}),)
CALL = ToolCall("call_1", "get_weather", '{"city": "Paris"}')
CONVERSATION = ChatPrompt(
    (
        ChatMessage("user", "Weather in Paris?"),
        ChatMessage("assistant", "", (CALL,)),
        ChatMessage("tool", "18 C", tool_call_id="call_1"),
    )
)
# A template with a tools section of its own, as Hugging Face's templates read them:
# tools as OpenAI's objects, calls' arguments as mappings.
TOOLS_TEMPLATE = (
    "{% for tool in tools %}TOOL {{ tool.function.name }}\n{% endfor %}"
    "{% for m in messages %}{{ m.role }}: {{ m.content }}"
    "{% for c in m.tool_calls or [] %}CALL {{ c.function.name }}({{ c.function.arguments.city }})"
    "{% endfor %}{% if m.tool_call_id %} [{{ m.tool_call_id }}]{% endif %}\n{% endfor %}"
)


def params(n: int = 1, max_tokens: int | None = None) -> GenerationParams:
    return GenerationParams(RequestId("r"), "m", CONVERSATION, "messages", max_tokens, n=n)


def test_a_template_with_a_tools_section_renders_tools_calls_and_results_itself(
    smollm2_tokenizer: Tokenizer,
) -> None:
    own = Tokenizer(
        smollm2_tokenizer.backend, eos_token_ids=frozenset({2}), chat_template=TOOLS_TEMPLATE
    )
    assert own.template_renders_tools
    text = render_chat(CONVERSATION, own, TOOLS, ToolFormat.HERMES)
    # (trim_blocks, as Hugging Face renders: no newline after a block tag)
    assert text == (
        "TOOL get_weather\nuser: Weather in Paris?assistant: CALL get_weather(Paris)"
        "tool: 18 C [call_1]"
    )


def test_a_template_without_one_gets_the_default_rendering(
    smollm2_tokenizer: Tokenizer,
) -> None:
    assert not smollm2_tokenizer.template_renders_tools  # SmolLM2's ChatML template
    text = render_chat(CONVERSATION, smollm2_tokenizer, TOOLS, ToolFormat.HERMES)
    assert text.startswith("<|im_start|>system\n# Tools")
    assert '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather"' in text
    assert "<|im_start|>user\n<tool_response>\n18 C\n</tool_response><|im_end|>" in text
    # Calls and results in the history are written out even when no tools are offered.
    history = render_chat(CONVERSATION, smollm2_tokenizer, (), ToolFormat.HERMES)
    assert "# Tools" not in history and "<tool_response>" in history


def test_the_size_check_counts_the_arguments_of_calls_in_the_history() -> None:
    check_prompt_size(CONVERSATION, 50, "messages")
    with pytest.raises(InvalidRequest):
        check_prompt_size(CONVERSATION, 30, "messages")  # 17 + 4 of text, 17 of arguments


def test_choices_share_the_prompts_blocks_and_must_fit_the_kv_cache_together() -> None:
    assert fit_choices(1000, 500, params(n=1), 4096) == 500
    assert fit_choices(1000, 500, params(n=6, max_tokens=500), 4096) == 500  # 4000 in all
    # Set no max_tokens: each choice gets what the cache leaves it.
    assert fit_choices(1000, 3096, params(n=4), 4096) == 774
    with pytest.raises(InvalidRequest) as info:
        fit_choices(1000, 500, params(n=7, max_tokens=500), 4096)
    assert info.value.param == "n" and "Lower n or max_tokens" in info.value.message
