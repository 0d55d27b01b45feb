"""The grammar a request's output must follow, compiled by the gateway before the request
queues: a schema the grammar engine cannot compile is a 400 that says why, never a
request that fails on its worker after admission.

Compiling runs off the event loop (a first schema takes about a millisecond, a version's
first constraint builds its token table: about 0.4 s), with llguidance on the version's
own tokenizer, the one its workers use. Compiled grammars are kept per version, each
version's in an LRU of GRAMMARS_PER_VERSION, for at most VERSIONS versions. The time it
took is the request's (its TTFT counts from its arrival), and the API edge writes it as
the `grammar` span of its trace (`GrammarCheck`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from dataclasses import dataclass

from vigil.engine.grammar import GrammarCompiler, GrammarError
from vigil.engine.request import Constraint, ConstraintKind
from vigil.engine.tokenizer import Tokenizer
from vigil.platform.control.specs import VersionRef
from vigil.platform.errors import InvalidRequest
from vigil.platform.gateway.params import GenerationParams
from vigil.platform.gateway.tool_formats import ToolFormat, calls_grammar, format_for

GRAMMARS_PER_VERSION = 256
VERSIONS = 16


@dataclass(frozen=True, slots=True)
class OutputRule:
    """What the output must be, and the request field to name when it cannot be."""

    constraint: Constraint
    param: str


@dataclass(frozen=True, slots=True)
class GrammarCheck:
    """One constraint compiled (or found compiled) for a request: its span's facts."""

    kind: ConstraintKind
    start_ts: float  # monotonic
    end_ts: float
    cached: bool


@dataclass(frozen=True, slots=True)
class OutputPlan:
    """How a request's output is held and read on the version it was placed on."""

    tool_format: ToolFormat  # the version's: how its tool calls are written and parsed
    rule: OutputRule | None
    grammar: GrammarCheck | None  # the rule's compile

    @property
    def constraint(self) -> Constraint | None:
        return None if self.rule is None else self.rule.constraint


def output_rule(params: GenerationParams, fmt: ToolFormat) -> OutputRule | None:
    """The constraint the request's output follows: the calls a forced tool_choice
    allows; under `auto` with a response_format, those calls or that JSON; else the
    response_format; None for free text (tool calls under `auto` are parsed after)."""
    forced = params.offers_tools and params.tool_choice.forced
    if forced or (params.offers_tools and params.response_format is not None):
        answer = None if forced else _schema_of(params.response_format)
        grammar = calls_grammar(
            fmt, params.tools, params.tool_choice, params.parallel_tool_calls, answer
        )
        return OutputRule(Constraint(ConstraintKind.GRAMMAR, grammar), "tools")
    if params.response_format is not None:
        return OutputRule(params.response_format, params.response_format_param)
    return None


def _schema_of(constraint: Constraint | None) -> dict[str, object]:
    assert constraint is not None
    if constraint.kind is ConstraintKind.JSON_SCHEMA:
        schema: dict[str, object] = json.loads(constraint.text)
        return schema
    assert constraint.kind is ConstraintKind.JSON_OBJECT, constraint.kind
    return {"type": "object"}


class GrammarChecks:
    def __init__(self) -> None:
        self._compilers: OrderedDict[str, GrammarCompiler] = OrderedDict()

    async def plan(
        self, params: GenerationParams, version: VersionRef, tokenizer: Tokenizer
    ) -> OutputPlan:
        """The request's output plan on this version, its grammar compiled."""
        fmt = format_for(version.param("tool_parser"), tokenizer.chat_template)
        rule = output_rule(params, fmt)
        grammar = None if rule is None else await self.check(version, tokenizer, rule)
        return OutputPlan(fmt, rule, grammar)

    async def check(
        self, version: VersionRef, tokenizer: Tokenizer, rule: OutputRule
    ) -> GrammarCheck:
        """The rule's constraint compiled for the version, or InvalidRequest naming the
        field when it cannot be."""
        compiler = self._compiler(version, tokenizer)
        cached = compiler.is_cached(rule.constraint)
        start_ts = time.monotonic()
        try:
            await asyncio.to_thread(compiler.compile, rule.constraint)
        except GrammarError as exc:
            raise InvalidRequest(str(exc), param=rule.param, code="invalid_schema") from None
        return GrammarCheck(rule.constraint.kind, start_ts, time.monotonic(), cached)

    def _compiler(self, version: VersionRef, tokenizer: Tokenizer) -> GrammarCompiler:
        compiler = self._compilers.get(version.key)
        if compiler is None:
            compiler = GrammarCompiler(tokenizer, tokenizer.vocab_size, GRAMMARS_PER_VERSION)
            self._compilers[version.key] = compiler
            if len(self._compilers) > VERSIONS:
                self._compilers.popitem(last=False)
        self._compilers.move_to_end(version.key)
        return compiler
