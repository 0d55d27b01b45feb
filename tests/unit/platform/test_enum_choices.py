"""An invalid enum value is answered with the values that field takes, found from the
request type: on the OpenAI routes' bodies, through optionals, lists and nested
structs."""

from __future__ import annotations

import pytest

from vigil.platform.api.body import decode_body
from vigil.platform.api.openai_schemas import ChatCompletionRequest, EmbeddingRequest
from vigil.platform.errors import InvalidRequest
from vigil.platform.wire.choices import choices_at, path_segments


def test_a_chat_message_with_an_unknown_role_lists_the_roles() -> None:
    body = b'{"model": "m", "messages": [{"role": "user", "content": "a"}, {"role": "robot"}]}'
    with pytest.raises(InvalidRequest) as caught:
        decode_body(body, ChatCompletionRequest)
    assert caught.value.param == "messages[1].role"
    assert caught.value.message.endswith(
        "Invalid enum value 'robot'; valid values: assistant, developer, system, tool, user."
    ), caught.value.message


def test_an_unknown_encoding_format_lists_the_formats() -> None:
    with pytest.raises(InvalidRequest, match="valid values: base64, float"):
        decode_body(b'{"model": "m", "input": "a", "encoding_format": "hex"}', EmbeddingRequest)


def test_a_field_that_is_no_enum_has_no_choices() -> None:
    assert choices_at(ChatCompletionRequest, path_segments("model")) is None
    assert choices_at(ChatCompletionRequest, path_segments("no.such.field")) is None
    assert path_segments("messages[1].role") == ["messages", "[]", "role"]
