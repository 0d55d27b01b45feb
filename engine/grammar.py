"""Constrained decoding: a compiled grammar per constraint, a matcher per sequence, and
a token mask for the constrained rows of each step.

The grammar engine is llguidance, chosen by ops/bench/grammar_bench.py on the bundled
SmolLM2 tokenizer (vocab 49,152): compiling a typical JSON schema takes about 1 ms
against xgrammar's 5 ms, and it installs as one dependency-free wheel, where xgrammar
needs transformers and triton at run time. xgrammar's mask is faster (0.04 ms against
0.3 ms for 16 rows), but both are under 1% of a decode step of that batch.

- A `Constraint` (engine/request.py) is compiled once per distinct (kind, text) into a
  `CompiledGrammar` and kept in a bounded LRU cache; a constraint that cannot compile
  raises `GrammarError`, a RequestRejected, before the request reaches the scheduler.
- Each constrained sequence gets its own `GrammarMatcher` (a copy of the compiled
  one's start state), advanced by every token it samples. Preemption keeps a
  sequence's output tokens (it is recomputed, not restarted), so its matcher stays
  exactly where those tokens left it.
- JSON is generated compact ("," and ":" separators, no whitespace between tokens): a
  small model allowed free whitespace can fill its whole budget with newlines.
- EOS is allowed only where the grammar is complete; a grammar that can take no
  further token ends the sequence at once (STOP) without waiting for an EOS.

Compiling needs no torch (the gateway compiles too, to refuse a bad schema before the
request queues, and its process never imports torch); the masks are in
engine/grammar_masks.py.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

import llguidance

from vigil.engine.limits import RequestRejected
from vigil.engine.request import Constraint, ConstraintKind
from vigil.engine.tokenizer import Tokenizer

_JSON_OPTIONS: Any = {"whitespace_flexible": False}


class GrammarError(RequestRejected):
    """A constraint the grammar engine cannot compile; the message says why."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "constraint")


def canonical_schema(schema: dict[str, Any] | str) -> str:
    """One text per schema (no spaces), so equal schemas share a cache entry. Keys keep
    their order: the output follows the order of `properties`."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise GrammarError(f"The JSON schema is not valid JSON: {exc}") from exc
    if not isinstance(schema, dict):
        raise GrammarError("The JSON schema must be a JSON object.")
    return json.dumps(schema, separators=(",", ":"), ensure_ascii=False)


class GrammarMatcher:
    """One sequence's position in its grammar."""

    __slots__ = ("_m", "num_tokens")

    def __init__(self, matcher: llguidance.LLMatcher) -> None:
        self._m = matcher
        self.num_tokens = 0  # tokens advanced past: always the sequence's output count

    def advance(self, token_id: int) -> None:
        accepted = self._m.consume_token(token_id)
        # The mask allowed only tokens the grammar accepts, so a refusal is a bug.
        assert accepted, f"grammar refused sampled token {token_id}: {self._m.get_error()}"
        self.num_tokens += 1

    @property
    def is_stopped(self) -> bool:
        """The grammar can take no further token: the output is complete."""
        return bool(self._m.is_stopped())

    @property
    def llmatcher(self) -> llguidance.LLMatcher:
        """llguidance's own matcher, for the masks (engine/grammar_masks.py)."""
        return self._m


class CompiledGrammar:
    __slots__ = ("_start",)

    def __init__(self, start: llguidance.LLMatcher) -> None:
        self._start = start

    def matcher(self) -> GrammarMatcher:
        return GrammarMatcher(self._start.deep_copy())  # about 30 us


class GrammarCompiler:
    """Compiles constraints for one tokenizer, with an LRU cache of `cache_size`.
    Thread-safe: the gateway's check and the engine thread may compile at once."""

    def __init__(self, tokenizer: Tokenizer, vocab_size: int, cache_size: int = 256) -> None:
        assert cache_size >= 1, f"grammar cache size {cache_size} < 1"
        self._source = tokenizer
        self._tokenizer: llguidance.LLTokenizer | None = None
        self.vocab_size = vocab_size
        self.cache_size = cache_size
        self._cache: OrderedDict[Constraint, CompiledGrammar] = OrderedDict()
        self._lock = threading.Lock()
        self.num_hits = 0
        self.num_misses = 0

    def is_cached(self, constraint: Constraint) -> bool:
        with self._lock:
            return constraint in self._cache

    def compile(self, constraint: Constraint) -> CompiledGrammar:
        with self._lock:
            found = self._cache.get(constraint)
            if found is not None:
                self._cache.move_to_end(constraint)
                self.num_hits += 1
                return found
            self.num_misses += 1
            compiled = self._compile(constraint)
            self._cache[constraint] = compiled
            if len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
            return compiled

    def _compile(self, constraint: Constraint) -> CompiledGrammar:
        if self._tokenizer is None:
            # About 0.4 s for SmolLM2: once per engine, on its first constrained request.
            self._tokenizer = llguidance.LLTokenizer(
                self._source.backend.to_str(),
                n_vocab=self.vocab_size,
                eos_token=sorted(self._source.eos_token_ids),
            )
        grammar = _grammar_text(constraint)
        matcher = llguidance.LLMatcher(self._tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise GrammarError(
                f"The {constraint.kind.value} constraint cannot be compiled: {matcher.get_error()}"
            )
        return CompiledGrammar(matcher)


def _grammar_text(constraint: Constraint) -> str:
    match constraint.kind:
        case ConstraintKind.JSON_SCHEMA:
            return str(
                llguidance.LLMatcher.grammar_from_json_schema(
                    constraint.text, overrides=_JSON_OPTIONS
                )
            )
        case ConstraintKind.JSON_OBJECT:
            return str(
                llguidance.LLMatcher.grammar_from_json_schema(
                    '{"type":"object"}', overrides=_JSON_OPTIONS
                )
            )
        case ConstraintKind.REGEX:
            return str(llguidance.LLMatcher.grammar_from_regex(constraint.text))
        case ConstraintKind.GRAMMAR:
            return str(llguidance.LLMatcher.grammar_from_lark(constraint.text))
