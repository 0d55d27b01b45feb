"""The gateway's grammar step: which rule a request's output follows, compiled off the
event loop before it queues, cached per version within bounds, a bad one refused with
the field that holds it."""

from __future__ import annotations

import pytest

from vigil.engine.bundled import ModelFormat, ModelKind
from vigil.engine.request import Constraint, ConstraintKind, RequestId
from vigil.engine.tokenizer import Tokenizer
from vigil.platform.control.specs import VersionRef
from vigil.platform.errors import InvalidRequest
from vigil.platform.gateway import grammars
from vigil.platform.gateway.grammars import GrammarChecks, OutputRule, output_rule
from vigil.platform.gateway.params import (
    FunctionTool,
    GenerationParams,
    TextPrompt,
    ToolChoice,
    ToolChoiceMode,
)
from vigil.platform.gateway.tool_formats import ToolFormat

SCHEMA = Constraint.json_schema({"type": "object", "properties": {"a": {"type": "integer"}}})
TOOLS = (FunctionTool("f", None, {"type": "object"}),)


def params(**kw: object) -> GenerationParams:
    return GenerationParams(RequestId("r"), "m", TextPrompt("x"), "prompt", **kw)  # type: ignore[arg-type]


def version(name: str) -> VersionRef:
    return VersionRef("m", name, ModelKind.GENERATE, ModelFormat.GGUF, "bundled:m")


def test_the_rule_is_the_forced_calls_or_the_response_format_or_none() -> None:
    assert output_rule(params(), ToolFormat.HERMES) is None
    assert output_rule(params(tools=TOOLS), ToolFormat.HERMES) is None  # auto: parsed after
    plain = output_rule(params(response_format=SCHEMA), ToolFormat.HERMES)
    assert plain == OutputRule(SCHEMA, "response_format")
    forced = output_rule(
        params(
            tools=TOOLS, tool_choice=ToolChoice(ToolChoiceMode.REQUIRED), response_format=SCHEMA
        ),
        ToolFormat.HERMES,
    )
    assert forced is not None and forced.param == "tools"
    assert forced.constraint.kind is ConstraintKind.GRAMMAR
    assert "answer" not in forced.constraint.text  # a forced call has no alternative
    either = output_rule(params(tools=TOOLS, response_format=SCHEMA), ToolFormat.HERMES)
    assert either is not None and "calls | answer" in either.constraint.text
    # tool_choice none: the tools are not offered, the format stands.
    none = ToolChoice(ToolChoiceMode.NONE)
    assert (
        output_rule(
            params(tools=TOOLS, tool_choice=none, response_format=SCHEMA), ToolFormat.HERMES
        )
        == plain
    )


async def test_a_constraint_is_compiled_once_per_version_and_a_bad_one_names_its_field(
    smollm2_tokenizer: Tokenizer,
) -> None:
    checks = GrammarChecks()
    rule = OutputRule(SCHEMA, "response_format")
    first = await checks.check(version("1"), smollm2_tokenizer, rule)
    again = await checks.check(version("1"), smollm2_tokenizer, rule)
    assert (first.cached, again.cached) == (False, True)
    assert first.kind is ConstraintKind.JSON_SCHEMA and first.end_ts >= first.start_ts
    bad = Constraint.json_schema({"type": "object", "properties": {"a": {"pattern": "(("}}})
    with pytest.raises(InvalidRequest) as info:
        await checks.check(version("1"), smollm2_tokenizer, OutputRule(bad, "guided_json"))
    assert info.value.param == "guided_json" and "cannot be compiled" in info.value.message


async def test_compilers_are_kept_for_a_bounded_number_of_versions(
    smollm2_tokenizer: Tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(grammars, "VERSIONS", 2)
    checks = GrammarChecks()
    rule = OutputRule(Constraint.json_object(), "response_format")
    for name in ("1", "2", "1", "3"):  # 2 is the least recently used when 3 comes
        await checks.check(version(name), smollm2_tokenizer, rule)
    assert (await checks.check(version("1"), smollm2_tokenizer, rule)).cached
    assert not (await checks.check(version("2"), smollm2_tokenizer, rule)).cached
