"""Prometheus metrics of sagas, kept from the executor's events.

Install `saga-runtime[metrics]` and give the executor the hook::

    from saga_runtime import SagaExecutor
    from saga_runtime.metrics import PrometheusHook, start_metrics_server

    metrics = PrometheusHook()
    executor = SagaExecutor(registry, store=store, hooks=[metrics])
    server = start_metrics_server(9464, metrics)     # or serve metrics.exposition() from your own app

Metrics:

- `saga_runtime_sagas_started_total{queue}`: sagas started or resumed here, by the queue a worker started them
  from ("default" for a saga run, resumed or recovered outside a queue start).
- `saga_runtime_sagas_finished_total{status,reason}`: sagas ended here; `reason` is `SagaResult.end_reason`
  ("failed", "cancelled", "rejected", "budget", "deadline", "diverged", "timeout"; "" for SUCCESS).
- `saga_runtime_attempts_total{tool,outcome}`: step attempts ended, `outcome` "success", "retry" (failed, another
  attempt follows), "failed" (failed, the last) or "cancelled" (stopped while running: outcome unknown).
- `saga_runtime_steps_finished_total{tool,status}`; `saga_runtime_step_duration_seconds{tool}`, retries included.
- `saga_runtime_compensations_total{tool,status}`.
- `saga_runtime_sagas_running`: sagas driven here now (not those waiting for approval).
- `saga_runtime_approvals_requested_total{tool}`.
- `saga_runtime_llm_tokens_total{model,kind}`: `LLMRunner` tokens by model asked, `kind` "input" (cached
  too) or "output".
- `saga_runtime_cost_total`: every charge (`ctx.charge`, `saga.charge`, an LLM call).
- `saga_runtime_queue_depth{queue}`: fed by a worker's `observe_queue_depth()`.
- `saga_runtime_takeovers_total`: sagas recovery took over from a gone executor (or `observe_takeover()`).
- `saga_runtime_sagas_waiting{kind}`: QUEUED, WAITING and PARKED sagas by what they wait for
  (`SagaResult.waiting_for`), fed by a worker's (or the console's) `observe_waiting()`.

Each hook has its own `CollectorRegistry` unless given one, so hooks never clash; hooks given the same
registry (even `prometheus_client.REGISTRY`) share its metrics.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

try:
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("saga_runtime.metrics needs prometheus-client: pip install 'saga-runtime[metrics]'") from exc

from saga_runtime._engine import SagaEvent
from saga_runtime._llm import ModelCallEvent

__all__ = ["CONTENT_TYPE", "MetricsServer", "PrometheusHook", "start_metrics_server"]

# Media type of `exposition()`.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DEFAULT_QUEUE = "default"
# Tools range from a cache read to a slow payment call: up to five minutes.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


@dataclass(frozen=True, slots=True)
class _Metrics:
    """The collectors of one registry."""

    started: Counter
    finished: Counter
    steps: Counter
    step_seconds: Histogram
    compensations: Counter
    running: Gauge
    approvals: Counter
    tokens: Counter
    cost: Counter
    queue_depth: Gauge
    takeovers: Counter
    attempts: Counter
    waiting: Gauge

    @classmethod
    def register(cls, registry: CollectorRegistry) -> _Metrics:
        return cls(
            started=Counter(
                "saga_runtime_sagas_started", "Sagas started or resumed here.", ["queue"], registry=registry
            ),
            finished=Counter(
                "saga_runtime_sagas_finished",
                "Sagas ended here, by terminal status and end reason.",
                ["status", "reason"],
                registry=registry,
            ),
            steps=Counter(
                "saga_runtime_steps_finished", "Steps ended, by tool and status.", ["tool", "status"], registry=registry
            ),
            step_seconds=Histogram(
                "saga_runtime_step_duration_seconds",
                "Seconds from a step's start to its end, retries included.",
                ["tool"],
                buckets=DURATION_BUCKETS,
                registry=registry,
            ),
            compensations=Counter(
                "saga_runtime_compensations",
                "Compensations ended, by tool and status.",
                ["tool", "status"],
                registry=registry,
            ),
            running=Gauge("saga_runtime_sagas_running", "Sagas driven here now.", registry=registry),
            approvals=Counter(
                "saga_runtime_approvals_requested", "Approval requests recorded, by tool.", ["tool"], registry=registry
            ),
            tokens=Counter(
                "saga_runtime_llm_tokens",
                "Tokens of LLMRunner model calls, by model and kind.",
                ["model", "kind"],
                registry=registry,
            ),
            cost=Counter("saga_runtime_cost", "Cost of every charge of the sagas.", registry=registry),
            queue_depth=Gauge(
                "saga_runtime_queue_depth", "Queued sagas, as a worker last sampled.", ["queue"], registry=registry
            ),
            takeovers=Counter("saga_runtime_takeovers", "Sagas taken over from another executor.", registry=registry),
            attempts=Counter(
                "saga_runtime_attempts",
                "Step attempts ended, by tool and outcome.",
                ["tool", "outcome"],
                registry=registry,
            ),
            waiting=Gauge(
                "saga_runtime_sagas_waiting",
                "Sagas that wait, by what they wait for, as last sampled.",
                ["kind"],
                registry=registry,
            ),
        )


_shared: weakref.WeakKeyDictionary[CollectorRegistry, _Metrics] = weakref.WeakKeyDictionary()
_shared_lock = threading.Lock()


def _metrics_of(registry: CollectorRegistry) -> _Metrics:
    """Return the collectors of `registry`, registering them the first time."""
    with _shared_lock:
        metrics = _shared.get(registry)
        if metrics is None:
            try:
                metrics = _Metrics.register(registry)
            except ValueError as exc:  # names taken by foreign collectors
                raise ValueError(
                    f"the registry already holds saga_runtime metrics not made by a PrometheusHook ({exc}); give "
                    "PrometheusHook a registry of its own, or none"
                ) from None
            _shared[registry] = metrics
        return metrics


class PrometheusHook:
    """A `SagaHook` keeping Prometheus metrics of sagas; one hook may serve several executors.

    `registry`: where to register the metrics; by default a new one (`hook.registry`).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._m = _metrics_of(self.registry)
        self._lock = threading.Lock()  # executors may run on several threads' loops
        self._running: set[str] = set()
        self._step_starts: dict[str, dict[str, datetime]] = {}  # saga id -> step id -> start

    def __repr__(self) -> str:
        return f"PrometheusHook(running={len(self._running)})"

    def __call__(self, event: SagaEvent) -> None:
        """Count one event."""
        handler = getattr(self, f"_{event.kind}", None)
        if handler is not None:
            handler(event)

    def observe_queue_depth(self, queue: str, depth: int) -> None:
        """Set how many sagas wait in `queue` now."""
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
            raise ValueError(f"depth must be a non-negative int, got {depth!r}")
        self._m.queue_depth.labels(queue=queue).set(depth)

    def observe_waiting(self, counts: Mapping[str, int]) -> None:
        """Set how many sagas wait for each kind of thing now (`SagaAdmin.waiting_counts()`)."""
        for kind, count in counts.items():
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ValueError(f"the count of {kind!r} must be a non-negative int, got {count!r}")
        for kind, count in counts.items():
            self._m.waiting.labels(kind=kind).set(count)

    def observe_takeover(self, count: int = 1) -> None:
        """Count sagas taken over from another executor."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"count must be a non-negative int, got {count!r}")
        self._m.takeovers.inc(count)

    def exposition(self) -> bytes:
        """Return the registry's metrics in Prometheus' text format (`CONTENT_TYPE`)."""
        return generate_latest(self.registry)

    def _saga_started(self, event: SagaEvent) -> None:
        queue = event.queue or DEFAULT_QUEUE
        self._m.started.labels(queue=queue).inc()
        with self._lock:
            if event.saga_id in self._running:
                return  # re-entered while it waits
            self._running.add(event.saga_id)
        self._m.running.inc()

    def _not_running(self, saga_id: str) -> None:
        with self._lock:
            self._step_starts.pop(saga_id, None)
            if saga_id not in self._running:
                return
            self._running.discard(saga_id)
        self._m.running.dec()

    def _saga_finished(self, event: SagaEvent) -> None:
        self._m.finished.labels(status=event.status or "", reason=event.reason or "").inc()
        self._not_running(event.saga_id)

    def _approval_requested(self, event: SagaEvent) -> None:
        self._m.approvals.labels(tool=event.tool_name or "").inc()
        self._not_running(event.saga_id)  # the saga stops and waits

    def _step_started(self, event: SagaEvent) -> None:
        with self._lock:
            self._step_starts.setdefault(event.saga_id, {})[event.step_id or ""] = event.at

    def _attempt_failed(self, event: SagaEvent) -> None:
        outcome = "retry" if event.will_retry else "failed"
        self._m.attempts.labels(tool=event.tool_name or "", outcome=outcome).inc()

    def _step_finished(self, event: SagaEvent) -> None:
        tool = event.tool_name or ""
        status = event.status or ""
        self._m.steps.labels(tool=tool, status=status).inc()
        if status == "SUCCESS":
            self._m.attempts.labels(tool=tool, outcome="success").inc()
        elif status == "CANCELLED" and event.error is not None and "cancelled while running" in event.error:
            self._m.attempts.labels(tool=tool, outcome="cancelled").inc()
        with self._lock:
            started = self._step_starts.get(event.saga_id, {}).pop(event.step_id or "", None)
        if started is not None:  # a rejected step never ran
            self._m.step_seconds.labels(tool=tool).observe(max(0.0, (event.at - started).total_seconds()))

    def _compensation_finished(self, event: SagaEvent) -> None:
        self._m.compensations.labels(tool=event.tool_name or "", status=event.status or "").inc()

    def _model_called(self, event: SagaEvent) -> None:
        if not isinstance(event, ModelCallEvent) or event.error is not None:
            return
        self._m.tokens.labels(model=event.model, kind="input").inc(event.input_tokens)
        self._m.tokens.labels(model=event.model, kind="output").inc(event.output_tokens)
        # Its cost comes as a `charged` event.

    def _charged(self, event: SagaEvent) -> None:
        if event.cost:
            self._m.cost.inc(event.cost)

    def _saga_taken_over(self, event: SagaEvent) -> None:
        self._m.takeovers.inc()


class MetricsServer:
    """The server `start_metrics_server` started: its `port`, and `close()`."""

    def __init__(self, server: Any, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread
        self.host: str = server.server_address[0]
        self.port: int = server.server_address[1]

    def close(self) -> None:
        """Stop serving and free the port; blocks up to ~0.5 s, so use a thread from async code."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def start_metrics_server(port: int, hook: PrometheusHook, *, host: str = "127.0.0.1") -> MetricsServer:
    """Serve `hook`'s metrics over HTTP on `host:port` from a daemon thread.

    Loopback by default: metrics name tools and models, so expose them on purpose. Port 0 picks a free one.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port must be an int from 0 to 65535, got {port!r}")
    server, thread = start_http_server(port, addr=host, registry=hook.registry)
    return MetricsServer(server, thread)
