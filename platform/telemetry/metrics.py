"""Prometheus series, one schema for every part (see ARCHITECTURE.md, core metrics).

Counters and histograms are updated as requests progress (RequestRecorder);
gauges are read from the engines' stats snapshots at scrape time, so they are
never stale and cost nothing between scrapes. Buckets follow vLLM's so its
dashboards translate, and include every SLO threshold an operator can set.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib import metadata

from prometheus_client import CollectorRegistry, Counter, Histogram, Info
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from vigil.engine.stats import BatchRecord, EngineStats, StepStats

TTFT_BUCKETS_S = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS_S = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
REQUEST_BUCKETS_S = (
    # Fine enough for queues of a few milliseconds and for embeddings; then vLLM's.
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)


# Actual over forecast time to first token: 1 is exact, 2 twice as late as forecast.
FORECAST_RATIO_BUCKETS = (0.25, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)
BATCH_WAIT_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)
STEP_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5, 5.0)


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    engine: str  # the engine's key: model@version, `#long` for a long-prompt pool
    version: str  # model@version, the version it runs
    replica: str  # the worker that runs it
    stats: EngineStats


class Metrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        # Request-level series: the name clients asked for, and the model version that
        # served it (a canary beside its stable version).
        labels = ["deployment", "version"]
        self.ttft = Histogram(
            "vigil_time_to_first_token_seconds",
            "Time from arrival at the gateway to the first output token.",
            labels,
            buckets=TTFT_BUCKETS_S,
            registry=registry,
        )
        self.itl = Histogram(
            "vigil_inter_token_latency_seconds",
            "Gap between consecutive output tokens of one request.",
            labels,
            buckets=ITL_BUCKETS_S,
            registry=registry,
        )
        self.e2e = Histogram(
            "vigil_e2e_request_latency_seconds",
            "Time from arrival at the gateway to the end of the request.",
            labels,
            buckets=REQUEST_BUCKETS_S,
            registry=registry,
        )
        self.queue_time = Histogram(
            "vigil_request_queue_time_seconds",
            "Time a request waited before its first step in a batch.",
            labels,
            buckets=REQUEST_BUCKETS_S,
            registry=registry,
        )
        self.ttft_forecast = Histogram(
            "vigil_admission_ttft_forecast_ratio",
            "A request's time to first token over the one admission forecast for it when it "
            "was admitted (1: as forecast; 2: twice as late).",
            labels,
            buckets=FORECAST_RATIO_BUCKETS,
            registry=registry,
        )
        self.prompt_tokens = Counter(
            "vigil_prompt_tokens", "Prompt tokens processed.", labels, registry=registry
        )
        self.generation_tokens = Counter(
            "vigil_generation_tokens", "Output tokens generated.", labels, registry=registry
        )
        self.admission = Counter(
            "vigil_admission_decisions",
            "Gateway admission decisions: admitted, shed or fallback, with the reason.",
            [*labels, "decision", "reason"],
            registry=registry,
        )
        self.requests = Counter(
            "vigil_requests",
            "Requests ended, by outcome: stop, length, abort (vLLM's finish reasons), shed, "
            "timed_out, error.",
            [*labels, "outcome"],
            registry=registry,
        )
        self.shadow_dropped = Counter(
            "vigil_shadow_dropped",
            "Mirrored requests to a shadow version not sent, or failed there, by why: busy, "
            "not_ready, failed. Those sent are in vigil_requests_total under the "
            "`<deployment>:shadow` label.",
            [*labels, "why"],
            registry=registry,
        )
        self.spans_dropped = Counter(
            "vigil_trace_spans_dropped",
            "Spans not exported: the export queue was full or the OTLP receiver failed.",
            registry=registry,
        )
        build = Info("vigil_build", "The running Vigil and what it runs on.", registry=registry)
        build.info(_build_info())


class EngineMetrics:
    """Per-step and per-batch histograms, observed in a worker's engine threads and
    exposed on that worker's own /metrics (the gateway cannot see single steps)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.spans_dropped = Counter(
            "vigil_trace_spans_dropped",
            "Spans not exported: the export queue was full or the OTLP receiver failed.",
            registry=registry,
        )
        engine = ["version"]  # the engine's key: model@version, `#long` for a long pool
        self.batch_size = Histogram(
            "vigil_batch_size",
            "Sequences in one engine step, or inputs in one embedding batch.",
            engine,
            buckets=BATCH_SIZE_BUCKETS,
            registry=registry,
        )
        self.batch_wait = Histogram(
            "vigil_batch_wait_seconds",
            "Time an embedding input waited for its batch to form.",
            engine,
            buckets=BATCH_WAIT_BUCKETS_S,
            registry=registry,
        )
        self.step_time = Histogram(
            "vigil_engine_step_seconds",
            "Wall time of one engine step: schedule, forward, sample, outputs.",
            engine,
            buckets=STEP_BUCKETS_S,
            registry=registry,
        )

    def observe_step(self, key: str, step: StepStats) -> None:
        self.batch_size.labels(key).observe(step.num_seqs)
        self.step_time.labels(key).observe(step.total_s)

    def observe_batch(self, key: str, batch: BatchRecord) -> None:
        self.batch_size.labels(key).observe(batch.size)
        wait = self.batch_wait.labels(key)
        for wait_s in batch.waits_s:
            wait.observe(wait_s)


class EngineStatsCollector(Collector):
    """Gauges and engine counters of every engine on every worker, read at scrape time
    from the latest stats the workers reported (the gateway's /metrics)."""

    def __init__(self, snapshots: Callable[[], Iterable[EngineSnapshot]]) -> None:
        self._snapshots = snapshots

    def collect(self) -> Iterator[Metric]:
        waiting = GaugeMetricFamily(
            "vigil_requests_waiting",
            "Requests queued in the engine.",
            labels=["version", "replica", "priority"],
        )
        running = GaugeMetricFamily(
            "vigil_requests_running",
            "Requests in the running batch.",
            labels=["version", "replica"],
        )
        kv = GaugeMetricFamily(
            "vigil_kv_cache_usage_ratio",
            "Used KV cache blocks over all blocks, 0-1.",
            labels=["version", "replica"],
        )
        free = GaugeMetricFamily(
            "vigil_kv_cache_free_blocks",
            "KV cache blocks no running request holds (evictable prefix blocks count).",
            labels=["version", "replica"],
        )
        queried = CounterMetricFamily(
            "vigil_prefix_cache_queried_tokens",
            "Prompt tokens looked up in the prefix cache on admission.",
            labels=["version", "replica"],
        )
        hits = CounterMetricFamily(
            "vigil_prefix_cache_hit_tokens",
            "Prompt tokens served from the prefix cache instead of computed.",
            labels=["version", "replica"],
        )
        preempt = CounterMetricFamily(
            "vigil_preemptions",
            "Sequences preempted for lack of KV cache blocks.",
            labels=["version", "replica"],
        )
        for snap in self._snapshots():
            s, ids = snap.stats, [snap.engine, snap.replica]
            waiting.add_metric([*ids, "interactive"], s.num_waiting_interactive)
            waiting.add_metric([*ids, "batch"], s.num_waiting_batch)
            running.add_metric(ids, s.num_running)
            kv.add_metric(ids, s.kv_cache_usage)
            free.add_metric(ids, s.num_kv_blocks_total - s.num_kv_blocks_used)
            preempt.add_metric(ids, s.num_preemptions)
            queried.add_metric(ids, s.num_prefix_queried_tokens)
            hits.add_metric(ids, s.num_prefix_hit_tokens)
        yield from (waiting, running, kv, free, preempt, queried, hits)


def _build_info() -> dict[str, str]:
    def version(distribution: str) -> str:
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            return "unknown"

    return {
        "version": version("vigil"),
        "python": platform.python_version(),
        "torch": version("torch"),
    }


class WorkerCollector(Collector):
    """`vigil_worker_up{replica}` and `vigil_worker_heartbeat_age_seconds{replica}`, from
    the gateway's registry of workers at scrape time."""

    def __init__(self, workers: Callable[[], Iterable[tuple[str, bool, float]]]) -> None:
        self._workers = workers  # (replica, up, seconds since its last heartbeat)

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "vigil_worker_up",
            "1 while the worker heart-beats and takes requests.",
            labels=["replica"],
        )
        age = GaugeMetricFamily(
            "vigil_worker_heartbeat_age_seconds",
            "Seconds since the worker's last heartbeat.",
            labels=["replica"],
        )
        for replica, is_up, age_s in self._workers():
            up.add_metric([replica], 1.0 if is_up else 0.0)
            age.add_metric([replica], age_s)
        yield up
        yield age


class RedisCollector(Collector):
    """`vigil_redis_up` and `vigil_redis_errors_total` of the Redis the gateways share
    counts in (only with `--redis-url`), at scrape time."""

    def __init__(self, state: Callable[[], tuple[bool | None, int]]) -> None:
        self._state = state  # (up, Redis operations failed since start)

    def collect(self) -> Iterator[Metric]:
        is_up, num_errors = self._state()
        yield GaugeMetricFamily(
            "vigil_redis_up",
            "1 while Redis answers; 0 while it is away and counts are kept per gateway.",
            value=1.0 if is_up else 0.0,
        )
        yield CounterMetricFamily(
            "vigil_redis_errors_total",
            "Redis operations that failed (each was done in this process's memory instead).",
            value=num_errors,
        )
