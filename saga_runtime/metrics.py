"""Prometheus metrics of sagas: counters, gauges and a histogram kept from the executor's events.

Install the extra (`pip install 'saga-runtime[metrics]'`) and give the executor the hook::

    from saga_runtime import SagaExecutor
    from saga_runtime.metrics import PrometheusHook, start_metrics_server

    metrics = PrometheusHook()
    executor = SagaExecutor(registry, store=store, hooks=[metrics])
    server = start_metrics_server(9464, metrics)     # or serve metrics.exposition() from your own app

The hook keeps:

- `saga_runtime_sagas_started_total{queue}`: each time this process starts (or resumes) driving a saga.
- `saga_runtime_sagas_finished_total{status}`: sagas that ended here, by terminal status.
- `saga_runtime_steps_finished_total{tool,status}` and `saga_runtime_step_duration_seconds{tool}` (a histogram
  of a step's start to its end, its retries included).
- `saga_runtime_compensations_total{tool,status}`: compensations that ended (COMPENSATED or COMPENSATION_FAILED).
- `saga_runtime_sagas_running`: sagas this process drives now (a saga waiting for an approval is not counted).
- `saga_runtime_approvals_requested_total{tool}`.
- `saga_runtime_llm_tokens_total{model,kind}` (`kind` "input", every input token, cached or not, and "output"):
  the model calls of `LLMRunner`s (`model` is the model asked).
- `saga_runtime_cost_total`: every charge of the sagas (a tool's `ctx.charge`, `saga.charge`, an LLM call).
- `saga_runtime_queue_depth{queue}`, which a worker feeds through `observe_queue_depth()` as it polls.
- `saga_runtime_takeovers_total`: sagas recovery took over here from an executor that was gone (also fed by
  `observe_takeover()`).

Each hook registers its metrics in its own `CollectorRegistry` unless given one, so two executors (or two apps)
in one process never clash. Hooks given the same registry share its metrics (the gauge counts both), so passing
`prometheus_client.REGISTRY` to several hooks is fine too.
"""

from __future__ import annotations

import threading
import weakref
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

# What `exposition()` returns: the plain text format every Prometheus reads (as prometheus_client serves it).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DEFAULT_QUEUE = "default"
# Tools range from a cache read to a payment provider's slow call, so the buckets reach five minutes.
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

    @classmethod
    def register(cls, registry: CollectorRegistry) -> _Metrics:
        return cls(
            started=Counter(
                "saga_runtime_sagas_started", "Sagas started or resumed here.", ["queue"], registry=registry
            ),
            finished=Counter(
                "saga_runtime_sagas_finished", "Sagas ended here, by terminal status.", ["status"], registry=registry
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
            except ValueError as exc:  # names taken by collectors registered some other way
                raise ValueError(
                    f"the registry already holds saga_runtime metrics not made by a PrometheusHook ({exc}); give "
                    "PrometheusHook a registry of its own, or none"
                ) from None
            _shared[registry] = metrics
        return metrics


class PrometheusHook:
    """A `SagaHook` keeping Prometheus metrics of the executor's sagas (see the module docstring).

    `registry`: where the metrics are registered; by default a new `CollectorRegistry` of this hook's own
    (`hook.registry`). One hook may serve several executors.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._m = _metrics_of(self.registry)
        self._lock = threading.Lock()  # an app may hand one hook to executors on several threads' loops
        self._running: set[str] = set()
        self._step_starts: dict[str, dict[str, datetime]] = {}  # saga id -> step id -> when it started

    def __repr__(self) -> str:
        return f"PrometheusHook(running={len(self._running)})"

    def __call__(self, event: SagaEvent) -> None:
        """Count one event."""
        handler = getattr(self, f"_{event.kind}", None)
        if handler is not None:
            handler(event)

    # -- what a worker feeds ---------------------------------------------------------------------------------

    def observe_queue_depth(self, queue: str, depth: int) -> None:
        """Set how many sagas wait in `queue` now (a worker samples it as it polls)."""
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
            raise ValueError(f"depth must be a non-negative int, got {depth!r}")
        self._m.queue_depth.labels(queue=queue).set(depth)

    def observe_takeover(self, count: int = 1) -> None:
        """Count sagas this process took over from another executor (a lease expired, a restart, a release)."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"count must be a non-negative int, got {count!r}")
        self._m.takeovers.inc(count)

    def exposition(self) -> bytes:
        """Return the metrics of this hook's registry in Prometheus' plain text format (media type CONTENT_TYPE)."""
        return generate_latest(self.registry)

    # -- events ----------------------------------------------------------------------------------------------

    def _saga_started(self, event: SagaEvent) -> None:
        queue = getattr(event, "queue", None) or DEFAULT_QUEUE  # queued sagas will carry theirs
        self._m.started.labels(queue=queue).inc()
        with self._lock:
            if event.saga_id in self._running:
                return  # started again without an end seen here (re-entered while it waits)
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
        self._m.finished.labels(status=event.status or "").inc()
        self._not_running(event.saga_id)

    def _approval_requested(self, event: SagaEvent) -> None:
        self._m.approvals.labels(tool=event.tool_name or "").inc()
        self._not_running(event.saga_id)  # a new request is undecided: the saga stops and waits

    def _step_started(self, event: SagaEvent) -> None:
        with self._lock:
            self._step_starts.setdefault(event.saga_id, {})[event.step_id or ""] = event.at

    def _step_finished(self, event: SagaEvent) -> None:
        tool = event.tool_name or ""
        self._m.steps.labels(tool=tool, status=event.status or "").inc()
        with self._lock:
            started = self._step_starts.get(event.saga_id, {}).pop(event.step_id or "", None)
        if started is not None:  # a step that never ran (rejected) has no duration
            self._m.step_seconds.labels(tool=tool).observe(max(0.0, (event.at - started).total_seconds()))

    def _compensation_finished(self, event: SagaEvent) -> None:
        self._m.compensations.labels(tool=event.tool_name or "", status=event.status or "").inc()

    def _model_called(self, event: SagaEvent) -> None:
        if not isinstance(event, ModelCallEvent) or event.error is not None:
            return
        self._m.tokens.labels(model=event.model, kind="input").inc(event.input_tokens)
        self._m.tokens.labels(model=event.model, kind="output").inc(event.output_tokens)
        # Its cost comes as the `charged` event of the runner's charge.

    def _charged(self, event: SagaEvent) -> None:
        if event.cost:
            self._m.cost.inc(event.cost)

    def _saga_taken_over(self, event: SagaEvent) -> None:
        self._m.takeovers.inc()


class MetricsServer:
    """The HTTP server `start_metrics_server` started: `port` it listens on, `close()` to stop it."""

    def __init__(self, server: Any, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread
        self.host: str = server.server_address[0]
        self.port: int = server.server_address[1]

    def close(self) -> None:
        """Stop serving and free the port (blocks up to about half a second: run it in a thread from async code)."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def start_metrics_server(port: int, hook: PrometheusHook, *, host: str = "127.0.0.1") -> MetricsServer:
    """Serve `hook`'s metrics over HTTP on `host:port` in a daemon thread (prometheus_client's own server).

    It listens on the loopback unless told otherwise: metrics name tools and models, so expose them beyond the
    machine on purpose (`host="0.0.0.0"`). Port 0 picks a free port (see `.port`).
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port must be an int from 0 to 65535, got {port!r}")
    server, thread = start_http_server(port, addr=host, registry=hook.registry)
    return MetricsServer(server, thread)
