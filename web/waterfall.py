"""One trace as the console draws it: its spans as bars on one time axis, children under
their parent, each with the few attributes an operator reads first.

The engine phases (prefill, decode) are split in three, from the span's
`vigil.steps.own_s` and `vigil.steps.shared_s` (engine/request.py StepTimes): the
request's own tokens' share of the engine steps it ran in, the rest of those steps
(waiting behind other sequences in a shared step), and what is left of the phase (time
between steps, or in steps that did not schedule it). Which step came when within a
phase is not recorded, so the three are drawn as proportions of the bar, in that order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vigil.platform.telemetry.trace_query import TraceSummary, root_span, summarize
from vigil.platform.telemetry.tracing import STEPS_OWN, STEPS_SHARED

# The segments of an engine phase: css class, legend.
OWN, SHARED, BETWEEN = "own", "shared", "between"
LEGEND = {
    OWN: "its own tokens in engine steps",
    SHARED: "waiting behind other sequences in shared engine steps",
    BETWEEN: "between engine steps (not scheduled, or the step loop's turn)",
}


@dataclass(frozen=True, slots=True)
class Segment:
    kind: str  # OWN, SHARED or BETWEEN
    width_pct: float  # of the bar
    duration_ms: float


@dataclass(frozen=True, slots=True)
class Bar:
    span_id: str
    name: str
    depth: int
    offset_pct: float  # of the trace, from its start
    width_pct: float
    duration_ms: float
    status: str
    notes: list[str]  # what to read first, in words
    segments: list[Segment]
    attributes: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Waterfall:
    summary: TraceSummary
    bars: list[Bar]
    shared_ms: float  # all phases' time behind other sequences
    legend: Mapping[str, str] = field(default_factory=lambda: LEGEND)


def waterfall(trace_id: str, spans: list[dict[str, Any]]) -> Waterfall:
    root = root_span(spans)
    start = root["start_ns"] or 0
    total_ns = max((s["end_ns"] or start) for s in spans) - start or 1
    children: dict[str | None, list[dict[str, Any]]] = {}
    for s in spans:
        if s is not root:
            children.setdefault(s["parent_span_id"], []).append(s)
    prompt_tokens = root["attributes"].get("gen_ai.usage.input_tokens")
    bars: list[Bar] = []

    def visit(span: dict[str, Any], depth: int) -> None:
        bars.append(_bar(span, depth, start, total_ns, prompt_tokens))
        for child in sorted(children.get(span["span_id"], []), key=lambda s: s["start_ns"] or 0):
            visit(child, depth + 1)

    visit(root, 0)
    shared_ms = sum(seg.duration_ms for b in bars for seg in b.segments if seg.kind == SHARED)
    return Waterfall(summarize(trace_id, spans), bars, round(shared_ms, 3))


def _bar(
    span: dict[str, Any], depth: int, start_ns: int, total_ns: int, prompt_tokens: int | None
) -> Bar:
    begin = (span["start_ns"] or start_ns) - start_ns
    length = (span["end_ns"] or span["start_ns"] or start_ns) - (span["start_ns"] or start_ns)
    attrs = dict(span["attributes"])
    return Bar(
        span_id=span["span_id"],
        name=span["name"],
        depth=depth,
        offset_pct=round(100 * begin / total_ns, 3),
        width_pct=round(max(100 * length / total_ns, 0.2), 3),
        duration_ms=span["duration_ms"],
        status=span["status"],
        notes=_notes(span["name"], attrs, prompt_tokens),
        segments=_segments(attrs, span["duration_ms"]),
        attributes=attrs,
    )


def _segments(attrs: Mapping[str, Any], duration_ms: float) -> list[Segment]:
    if STEPS_OWN not in attrs or duration_ms <= 0:
        return []
    own_ms = 1000 * float(attrs[STEPS_OWN])
    shared_ms = 1000 * float(attrs.get(STEPS_SHARED, 0.0))
    # Steps are timed inside the phase, but clocks differ by microseconds: never over 100%.
    scale = min(1.0, duration_ms / (own_ms + shared_ms)) if own_ms + shared_ms > 0 else 1.0
    own_ms, shared_ms = own_ms * scale, shared_ms * scale
    between_ms = max(duration_ms - own_ms - shared_ms, 0.0)
    return [
        Segment(kind, round(100 * ms / duration_ms, 3), round(ms, 3))
        for kind, ms in ((OWN, own_ms), (SHARED, shared_ms), (BETWEEN, between_ms))
    ]


def _ms(value: Any) -> str:
    return f"{1000 * float(value):,.0f} ms"


def _notes(name: str, attrs: Mapping[str, Any], prompt_tokens: int | None) -> list[str]:
    notes: list[str] = []
    if name == "admission":
        notes.append(
            f"{attrs.get('vigil.admission.verdict')} ({attrs.get('vigil.admission.reason')})"
        )
        if "vigil.admission.predicted_ttft_s" in attrs:
            notes.append(f"predicted TTFT {_ms(attrs['vigil.admission.predicted_ttft_s'])}")
    if name == "prefill":
        cached = attrs.get("vigil.cached_prompt_tokens")
        if cached is not None:
            of = f" of {prompt_tokens}" if prompt_tokens is not None else ""
            notes.append(f"{cached}{of} prompt tokens cached")
        chunks = attrs.get("vigil.prefill_chunks")
        if chunks is not None:
            notes.append(f"{chunks} chunk{'s' if chunks != 1 else ''}")
    if STEPS_OWN in attrs:
        notes.append(f"own tokens {_ms(attrs[STEPS_OWN])}")
        notes.append(f"behind other sequences {_ms(attrs.get(STEPS_SHARED, 0))}")
    if name == "grammar":
        cached = "cached" if attrs.get("vigil.grammar.cached") else "compiled"
        notes.append(f"{attrs.get('vigil.grammar.kind')}, {cached}")
    return notes
