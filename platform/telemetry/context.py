"""What is known about the API request being served, for its log lines and its trace.

The gateway's middleware (api/observe.py) opens a `RequestContext` per API request and
keeps it in a context variable; the gateway notes what it decides as it goes (request id,
deployment, version, priority, admission verdict and reason, tokens, TTFT); every log line
written while the request is served carries its request id and trace id (`ContextFilter`),
and one access line sums it up when the response is done.
"""

from __future__ import annotations

import contextvars
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from vigil.engine.request import FinishEvent
from vigil.platform.telemetry.recorder import Outcome, RequestRecord
from vigil.platform.telemetry.tracing import RequestTrace

CURRENT: contextvars.ContextVar[RequestContext | None] = contextvars.ContextVar(
    "vigil_request", default=None
)
access_log = logging.getLogger("vigil.access")


@dataclass(slots=True)
class RequestContext:
    method: str
    path: str
    start_ts: float = field(default_factory=time.monotonic)
    request_id: str | None = None
    trace: RequestTrace | None = None
    ttft_target_s: float | None = None  # the SLO of the deployment that serves it
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def trace_id(self) -> str | None:
        return self.trace.trace_id if self.trace is not None else None

    def note(self, **fields: Any) -> None:
        self.fields.update(fields)

    def ended(self, record: RequestRecord, finish: FinishEvent | None) -> None:
        """The request's end at the engine (`finish`: None when its client left first):
        its numbers, and the trace's engine phases."""
        clock = record.clock
        ttft = clock.ttft_s
        self.note(
            outcome=record.outcome.value,
            prompt_tokens=record.num_prompt_tokens,
            output_tokens=record.num_output_tokens,
            ttft_ms=round(ttft * 1000, 1) if ttft is not None else None,
        )
        if self.trace is not None:
            target = self.ttft_target_s
            self.trace.set(
                **{
                    "gen_ai.usage.input_tokens": record.num_prompt_tokens,
                    "gen_ai.usage.output_tokens": record.num_output_tokens,
                    "gen_ai.response.finish_reasons": [record.outcome.value],
                    "vigil.ttft_s": round(ttft, 4) if ttft is not None else None,
                }
            )
            self.trace.ended(
                cached_prompt_tokens=finish.num_cached_prompt_tokens if finish else None,
                prefill_chunks=finish.num_prefill_chunks if finish else None,
                step_times=finish.step_times if finish else None,
                scheduled_ts=clock.scheduled_ts,
                first_token_ts=clock.first_token_ts,
                finished_ts=clock.finished_ts or time.monotonic(),
                failed=record.outcome in (Outcome.ERROR, Outcome.TIMED_OUT),
                over_slo=target is not None and ttft is not None and ttft > target,
            )

    def access_line(self, status: int) -> None:
        line = {
            "method": self.method,
            "path": self.path,
            "status": status,
            "duration_ms": round((time.monotonic() - self.start_ts) * 1000, 1),
            **{k: v for k, v in self.fields.items() if v is not None},
        }
        access_log.info(" ".join(f"{k}={v}" for k, v in line.items()), extra={"fields": line})


def current() -> RequestContext | None:
    return CURRENT.get()


def note(**fields: Any) -> None:
    context = CURRENT.get()
    if context is not None:
        context.note(**fields)


class ContextFilter(logging.Filter):
    """Gives every record `request_id` and `trace_id` (empty outside a request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = CURRENT.get()
        record.request_id = (context.request_id or "") if context else ""
        record.trace_id = (context.trace_id or "") if context else ""
        return True


class TextFormatter(logging.Formatter):
    def __init__(self, prefix: str = "") -> None:
        super().__init__(f"%(asctime)s %(levelname)s {prefix}%(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        ids = [
            f"{name}={value}"
            for name in ("request_id", "trace_id")
            if (value := getattr(record, name, ""))
        ]
        return f"{text} [{' '.join(ids)}]" if ids else text


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the request's ids, and
    an access line's fields."""

    def __init__(self, extra: dict[str, str] | None = None) -> None:
        super().__init__()
        self.extra = extra or {}

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **self.extra,
        }
        for name in ("request_id", "trace_id"):
            if value := getattr(record, name, ""):
                line[name] = value
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update(fields)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure_logging(level: str, fmt: str, prefix: str = "", **extra: str) -> None:
    """The root logger: text (the default) or JSON lines, with the request's ids."""
    handler = logging.StreamHandler()
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter(extra) if fmt == "json" else TextFormatter(prefix))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per heartbeat otherwise
