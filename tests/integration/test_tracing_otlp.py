"""Traces leave a real `vigil serve` over OTLP/HTTP: a receiver on 127.0.0.1 decodes them
with the opentelemetry-proto package and finds one trace per request with the gateway's
and the worker's spans, linked under the caller's traceparent, the GenAI attributes, and
engine phases that add up. With the receiver gone, requests are unaffected and the lost
spans are counted. The server's JSON log has the request's ids on its access line."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m-instruct"
TRACE = "0af7651916cd43dd8448eb211c80319c"
PARENT = "b7ad6b7169203331"


@dataclass
class Collector:
    """An OTLP/HTTP trace receiver: every span it was sent, flattened."""

    spans: list[dict[str, Any]] = field(default_factory=list)

    def serve(self) -> ThreadingHTTPServer:
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                request = ExportTraceServiceRequest.FromString(body)
                for resource in request.resource_spans:
                    service = next(
                        a.value.string_value
                        for a in resource.resource.attributes
                        if a.key == "service.name"
                    )
                    for scope in resource.scope_spans:
                        for s in scope.spans:
                            collector.spans.append(_span(service, s))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *_: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    def trace(self, trace_id: str) -> list[dict[str, Any]]:
        return [s for s in self.spans if s["trace_id"] == trace_id]


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def _span(service: str, s: Any) -> dict[str, Any]:
    return {
        "service": service,
        "name": s.name,
        "trace_id": s.trace_id.hex(),
        "span_id": s.span_id.hex(),
        "parent": s.parent_span_id.hex() or None,
        "start": s.start_time_unix_nano,
        "end": s.end_time_unix_nano,
        "attributes": {a.key: _value(a.value) for a in s.attributes},
    }


@pytest.fixture(scope="module")
def collector() -> Iterator[tuple[Collector, ThreadingHTTPServer]]:
    c = Collector()
    server = c.serve()
    yield c, server
    server.shutdown()


def _wait(condition: Any, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_one_trace_crosses_gateway_and_worker_and_a_dead_receiver_costs_nothing(
    tmp_path_factory, launch_vigil, collector
) -> None:  # type: ignore[no-untyped-def]
    received, server = collector
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    data_dir = tmp_path_factory.mktemp("traced")
    flags = ["--otlp-endpoint", endpoint, "--log-format", "json"]
    flags += ["--trace-parent-from", "127.0.0.1"]  # the caller is a trusted proxy here
    with launch_vigil(data_dir, *flags) as vigil:
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "Name a colour."}],
            "max_tokens": 4,
            "temperature": 0,
        }
        headers = {"traceparent": f"00-{TRACE}-{PARENT}-01"}
        r = httpx.post(
            f"{vigil.base_url}/v1/chat/completions", json=body, headers=headers, timeout=60
        )
        assert r.status_code == 200 and r.headers["x-vigil-trace-id"] == TRACE
        _wait(
            lambda: (
                {s["service"] for s in received.trace(TRACE)} == {"vigil-gateway", "vigil-worker"}
                and len(received.trace(TRACE)) >= 7
            ),
            "the gateway's and the worker's spans",
        )
        spans = {s["name"]: s for s in received.trace(TRACE)}
        server_span = spans[f"chat {MODEL}"]
        assert server_span["parent"] == PARENT
        attrs = server_span["attributes"]
        assert attrs["gen_ai.operation.name"] == "chat"
        assert attrs["gen_ai.request.model"] == MODEL and attrs["gen_ai.request.max_tokens"] == 4
        assert attrs["gen_ai.usage.output_tokens"] == 4 and attrs["gen_ai.usage.input_tokens"] > 0
        assert attrs["gen_ai.response.finish_reasons"] == ["length"]
        assert attrs["gen_ai.request.temperature"] == 0.0
        hop = next(s for name, s in spans.items() if name.startswith("worker "))
        assert hop["parent"] == server_span["span_id"]
        worker = spans["vigil.worker generate"]
        assert worker["parent"] == hop["span_id"] and worker["service"] == "vigil-worker"
        assert worker["attributes"]["gen_ai.usage.output_tokens"] == 4
        phases = [spans[n] for n in ("queue", "prefill", "decode")]
        assert all(p["parent"] == hop["span_id"] for p in phases)
        prefill = spans["prefill"]["attributes"]
        assert prefill["vigil.prefill_chunks"] == 1 and prefill["vigil.cached_prompt_tokens"] >= 0
        phases_ns = sum(p["end"] - p["start"] for p in phases)
        assert abs(phases_ns - (hop["end"] - hop["start"])) < 5e6  # within 5 ms
        assert hop["end"] <= server_span["end"] and server_span["start"] <= hop["start"]

        # The access line in the server's log (JSON lines) carries the request's ids.
        request_id = r.headers["x-request-id"]
        lines = [
            json.loads(x) for x in vigil.log_path.read_text().splitlines() if x.startswith("{")
        ]
        [access] = [
            x
            for x in lines
            if x.get("logger") == "vigil.access" and x.get("request_id") == request_id
        ]
        assert access["trace_id"] == TRACE and access["status"] == 200
        assert access["deployment"] == MODEL and access["output_tokens"] == 4

        # The receiver goes away: requests are served as before; the spans are counted lost.
        server.shutdown()
        server.server_close()
        for _ in range(3):
            ok = httpx.post(f"{vigil.base_url}/v1/chat/completions", json=body, timeout=60)
            assert ok.status_code == 200

        def dropped() -> float:
            text = httpx.get(f"{vigil.base_url}/metrics", timeout=10).text
            for line in text.splitlines():
                if line.startswith("vigil_trace_spans_dropped_total "):
                    return float(line.split()[1])
            return 0.0

        _wait(lambda: dropped() > 0, "the lost spans to be counted", 45)
