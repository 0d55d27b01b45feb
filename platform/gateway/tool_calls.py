"""Tool calls read out of a model's output, as it streams or whole.

Two formats, the ones open models are trained on:

    hermes       <tool_call>\\n{"name": "f", "arguments": {...}}\\n</tool_call>, one block
                 a call (Hermes 2 Pro, Qwen 2/2.5/3, SmolLM3), text around them allowed
    llama3_json  {"name": "f", "parameters": {...}}, calls joined by ';' (Llama 3.1+),
                 the whole output a call or none of it

A parser is fed the output as it comes and returns deltas: text for the message's
content, the start of a call (its name), and fragments of its arguments as the model
writes them, so a stream can pass them on at once in OpenAI's shape. Reading a whole
output is the same parser fed once, so streamed and whole answers agree.

Arguments are streamed from the moment `"name": ..., "arguments":` has been read (the
order every trained format and Vigil's grammars use); a call written in another key
order is given whole when its object closes. A block that is not a call (not a JSON
object with a name and arguments) is given back as text. Whitespace after the text is
held until more text follows: a model's newline before its first call is not content.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"
PYTHON_TAG = "<|python_tag|>"  # Llama 3's marker before a call, when it is not special
_CALL_HEAD = re.compile(
    r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*', re.S
)
# A head longer than this that has not matched never will (names are at most 64 chars).
_MAX_HEAD_CHARS = 256


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class CallStart:
    index: int  # of the call in this output
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class ArgumentsDelta:
    index: int
    text: str


Delta = TextDelta | CallStart | ArgumentsDelta


@dataclass(frozen=True, slots=True)
class ParsedCall:
    id: str
    name: str
    arguments: str  # JSON text, as written


@dataclass(frozen=True, slots=True)
class Parsed:
    content: str | None  # None when there were calls and no other text
    calls: tuple[ParsedCall, ...]


class ToolCallParser(Protocol):
    def feed(self, text: str) -> list[Delta]: ...

    def finish(self) -> list[Delta]: ...


def parse_whole(parser: ToolCallParser, text: str) -> Parsed:
    """A whole output read by a fresh parser."""
    return assemble([*parser.feed(text), *parser.finish()])


def assemble(deltas: list[Delta]) -> Parsed:
    content = "".join(d.text for d in deltas if isinstance(d, TextDelta))
    starts = [d for d in deltas if isinstance(d, CallStart)]
    arguments = {s.index: "" for s in starts}
    for d in deltas:
        if isinstance(d, ArgumentsDelta):
            arguments[d.index] += d.text
    calls = tuple(ParsedCall(s.id, s.name, arguments[s.index]) for s in starts)
    if calls and not content.strip():
        return Parsed(None, calls)
    return Parsed(content, calls)


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


class _Scanner:
    """Where a JSON value ends, fed a character at a time: depth of brackets outside
    strings. `done` once the value that began with the first bracket has closed."""

    __slots__ = ("depth", "done", "escaped", "in_string", "started")

    def __init__(self) -> None:
        self.depth, self.started, self.done = 0, False, False
        self.in_string = self.escaped = False

    def push(self, c: str) -> None:
        if self.in_string:
            if self.escaped:
                self.escaped = False
            elif c == "\\":
                self.escaped = True
            elif c == '"':
                self.in_string = False
        elif c == '"':
            self.in_string = True
        elif c in "{[":
            self.depth += 1
            self.started = True
        elif c in "}]":
            self.depth -= 1
            self.done = self.started and self.depth == 0


class _CallBody:
    """One call's JSON object, fed until it closes. Emits the call's start once its head
    and the first bracket of its arguments are read, then the arguments as they come;
    `ok` tells, once closed, whether it was a call at all (when not, its text goes back
    to the content)."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.text = ""
        self.object = _Scanner()
        self.arguments = _Scanner()
        self.name: str | None = None  # once the head is read
        self.streamable = True  # false once the head cannot match, or arguments are no object
        self.started = False  # CallStart given
        self.closed = False
        self.ok = False

    def feed(self, chunk: str, out: list[Delta]) -> str:
        """Consume chunk up to the object's end; return what follows it."""
        streamed = ""
        for i, c in enumerate(chunk):
            self.text += c
            self.object.push(c)
            if self.started:
                if not self.arguments.done:
                    self.arguments.push(c)
                    streamed += c
            elif self.name is not None:
                if c == "{":
                    self.started = True
                    out.append(CallStart(self.index, new_call_id(), self.name))
                    self.arguments.push(c)
                    streamed += c
                elif not c.isspace():
                    self.name, self.streamable = None, False  # read whole when it closes
            elif self.streamable:
                self._read_head()
            if self.object.done:
                if streamed:
                    out.append(ArgumentsDelta(self.index, streamed))
                self._close(out)
                return chunk[i + 1 :]
        if streamed:
            out.append(ArgumentsDelta(self.index, streamed))
        return ""

    def _read_head(self) -> None:
        if len(self.text) > _MAX_HEAD_CHARS:
            self.streamable = False
            return
        head = _CALL_HEAD.fullmatch(self.text)
        if head is not None:
            self.name = json.loads(f'"{head.group(1)}"')

    def _close(self, out: list[Delta]) -> None:
        """The object has closed: a call streamed already stands; any other is read whole."""
        self.closed = True
        if self.started:
            self.ok = True
            return
        call = _call_of(self.text)
        if call is not None:
            name, arguments = call
            out.append(CallStart(self.index, new_call_id(), name))
            out.append(ArgumentsDelta(self.index, arguments))
            self.ok = True

    def end(self, out: list[Delta]) -> bool:
        """The output ended inside the object: a started call stands (its arguments cut
        short); otherwise whether the text read so far is a call after all."""
        if not self.closed:
            self._close(out)
        return self.ok


def _call_of(text: str) -> tuple[str, str] | None:
    """(name, arguments as JSON text) when text is a call object in any key order."""
    try:
        value: Any = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = value.get("arguments", value.get("parameters"))
    if arguments is None:
        return None
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        return value["name"], arguments
    return value["name"], json.dumps(arguments, ensure_ascii=False)


class _Text:
    """Content, with trailing whitespace held until text follows it."""

    def __init__(self) -> None:
        self.held = ""

    def add(self, text: str, out: list[Delta]) -> None:
        body = text.rstrip()
        if body:
            out.append(TextDelta(self.held + body))
            self.held = ""
        self.held += text[len(body) :]

    def drop(self) -> None:
        self.held = ""

    def flush(self, out: list[Delta], num_calls: int) -> None:
        if self.held and not num_calls:
            out.append(TextDelta(self.held))
        self.held = ""


class HermesParser:
    """<tool_call> blocks anywhere in the output; text around them is content."""

    def __init__(self) -> None:
        self._text = _Text()
        self._pending = ""  # text that may be the start of <tool_call>
        self._body: _CallBody | None = None
        self._after = ""  # between a call's object and its </tool_call>
        self._num_calls = 0

    def feed(self, text: str) -> list[Delta]:
        out: list[Delta] = []
        rest = self._pending + text
        self._pending = ""
        while rest:
            if self._body is not None:
                rest = self._in_call(rest, out)
                continue
            at = rest.find(HERMES_OPEN)
            if at < 0:
                keep = _partial_suffix(rest, HERMES_OPEN)
                self._text.add(rest[: len(rest) - keep], out)
                self._pending = rest[len(rest) - keep :]
                break
            self._text.add(rest[:at], out)
            self._text.drop()  # the newline before a call is not content
            self._body = _CallBody(self._num_calls)
            rest = rest[at + len(HERMES_OPEN) :]
        return out

    def _in_call(self, rest: str, out: list[Delta]) -> str:
        body = self._body
        assert body is not None
        if not body.closed:
            if not body.text.strip() and rest.strip() and not rest.lstrip().startswith("{"):
                return self._not_a_call(rest, out)  # <tool_call> then no JSON object
            rest = body.feed(rest, out)
            if not body.closed:
                return ""
            if not body.ok:
                return self._not_a_call(rest, out)
        self._after += rest
        at = self._after.find(HERMES_CLOSE)
        if at < 0:
            return ""
        rest, self._after = self._after[at + len(HERMES_CLOSE) :], ""
        self._body, self._num_calls = None, self._num_calls + 1
        return rest

    def _not_a_call(self, rest: str, out: list[Delta]) -> str:
        body = self._body
        assert body is not None
        self._text.add(HERMES_OPEN + body.text, out)
        self._body = None
        return rest

    def finish(self) -> list[Delta]:
        out: list[Delta] = []
        if self._body is not None:
            if self._body.end(out):
                self._num_calls += 1
            else:
                self._text.add(HERMES_OPEN + self._body.text, out)
            self._body = None
        self._text.add(self._pending, out)
        self._text.flush(out, self._num_calls)
        return out


class Llama3JsonParser:
    """Calls as JSON objects joined by ';' when the output starts with one; otherwise
    the whole output is content."""

    def __init__(self) -> None:
        self._text = _Text()
        self._mode = "start"  # start | calls | text
        self._head = ""  # leading whitespace and the python tag, while undecided
        self._body: _CallBody | None = None
        self._num_calls = 0

    def feed(self, text: str) -> list[Delta]:
        out: list[Delta] = []
        rest = text
        while rest:
            if self._mode == "text":
                self._text.add(rest, out)
                break
            if self._body is not None:
                rest = self._body.feed(rest, out)
                if not self._body.closed:
                    break
                if not self._body.ok:
                    self._mode = "text"
                    self._text.add(self._body.text, out)
                else:
                    self._num_calls += 1
                self._body = None
                continue
            self._head, rest = self._head + rest, ""
            probe = self._head.lstrip()
            if self._mode == "start":
                if PYTHON_TAG.startswith(probe) and probe != PYTHON_TAG:
                    break  # may be the tag: wait for more
                probe = probe.removeprefix(PYTHON_TAG).lstrip()
            probe = probe.lstrip(" \n\t;")  # between calls
            if not probe:
                break
            if probe[0] == "{":
                self._mode, self._head = "calls", ""
                self._body = _CallBody(self._num_calls)
                rest = probe
            else:  # text: all of it, unless it follows calls
                self._mode = "text"
                rest, self._head = (probe if self._num_calls else self._head), ""
        return out

    def finish(self) -> list[Delta]:
        out: list[Delta] = []
        if self._body is not None:
            if self._body.end(out):
                self._num_calls += 1
            else:
                self._text.add(self._body.text, out)
        elif self._mode == "start":
            self._text.add(self._head, out)
        self._text.flush(out, self._num_calls)
        return out


def _partial_suffix(text: str, tag: str) -> int:
    """The length of the longest end of text that begins tag."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0
