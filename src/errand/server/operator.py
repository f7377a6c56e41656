"""What an operator's tools ask of a server: ``/healthz``, ``/readyz`` and ``/metrics``.

* ``/healthz`` — the process answers (liveness). Nothing is checked, so a probe never
  restarts a server because its database is down: restarting would not bring it back.
* ``/readyz`` — the server can do its work now: the store answers, the engine runs
  (not refused, not restarting), and with the Temporal engine the Temporal service
  answers its health check. 200 when all hold, 503 with each check's reason when not.
* ``/metrics`` — Prometheus's text format (``prometheus-client``): tasks by state,
  queue age, round durations, live workers and sandboxes, events by kind, egress
  refusals, model calls, tokens and cost, retries. Read from the store at scrape
  time (:mod:`errand.tasks.store.census`), so it covers every worker, not this process.

The probes are open (a kubelet carries no token) and say no more than "ok" or which
dependency is down; ``/metrics`` wants the server's token like the API does.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from errand.database import outage
from errand.sandbox import AsyncSandbox
from errand.tasks.store import census
from errand.tasks.store.tasks import TaskStore

__all__ = ["PROBE_TIMEOUT", "EngineStatus", "StoreCollector", "router"]

router = APIRouter(tags=["operator"])
#: How long one readiness check may take before it counts as down.
PROBE_TIMEOUT = 3.0
#: Event kinds that are a retry of something.
RETRIES = ("model_retry",)


class EngineStatus(enum.StrEnum):
    """Where the server's engine stands, as ``/readyz`` reports it."""

    STARTING = "starting"
    RUNNING = "running"
    REFUSED = "refused"  # another engine or worker serves the store or this home
    RESTARTING = "restarting"  # it stopped on an error and is being started again
    OFF = "off"  # this server runs no engine (``--no-engine``): ready without one


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


@router.get("/healthz", include_in_schema=False)
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", include_in_schema=False)
async def readyz(request: Request) -> JSONResponse:
    state = request.app.state
    checks = await asyncio.gather(_check_store(state.service.store), _check_engine(state),
                                  *([_check_temporal(state)] if _runs_temporal(state) else []))
    ready = all(check.ok for check in checks)
    body = {"status": "ready" if ready else "not ready",
            "checks": {check.name: {"ok": check.ok, "detail": check.detail} for check in checks}}
    return JSONResponse(body, status_code=200 if ready else 503)


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    registry: CollectorRegistry = request.app.state.metrics
    text = await asyncio.to_thread(generate_latest, registry)
    return Response(text, media_type=CONTENT_TYPE_LATEST)


def _runs_temporal(state: Any) -> bool:
    return bool(state.config.run_engine and state.config.engine == "temporal")


async def _check_store(store: TaskStore) -> Check:
    def ping() -> None:
        with store.engine.connect() as connection:
            connection.exec_driver_sql("SELECT 1")

    return await _bounded("store", asyncio.to_thread(ping), "answers", down=_store_down)


async def _check_engine(state: Any) -> Check:
    status = EngineStatus(getattr(state, "engine_status", EngineStatus.OFF))
    reason = getattr(state, "engine_reason", "") or ""
    ok = status in (EngineStatus.RUNNING, EngineStatus.OFF)
    return Check("engine", ok, f"{status.value}: {reason}" if reason else status.value)


async def _check_temporal(state: Any) -> Check:
    """The service's health over one client kept on the app: a probe every few seconds does not
    open a connection each time (the client reconnects by itself after the service restarts)."""
    async def health() -> None:
        client = getattr(state, "temporal_probe", None)
        if client is None:
            from temporalio.client import Client

            from errand.tasks.engines.temporal import TemporalSettings

            settings = TemporalSettings.from_environment(state.config.temporal)
            client = await Client.connect(settings.address, namespace=settings.namespace)
            state.temporal_probe = client
        await client.service_client.check_health()

    return await _bounded("temporal", health(), "answers", down=_temporal_down)


async def _bounded(name: str, probe: Any, ok_detail: str, *,
                   down: Callable[[Exception], str | None] = lambda _error: None) -> Check:
    try:
        await asyncio.wait_for(probe, PROBE_TIMEOUT)
    except TimeoutError:
        return Check(name, False, f"no answer within {PROBE_TIMEOUT:g} s")
    except Exception as error:  # noqa: BLE001 - any failure is the answer: the dependency is down
        return Check(name, False, down(error) or _first_line(error))
    return Check(name, True, ok_detail)


def _store_down(error: Exception) -> str | None:
    """The database away, said without its address or the driver's words (the probe is open)."""
    return "the database does not answer; the server's log says why" if outage(error) is not None else None


def _temporal_down(error: Exception) -> str | None:
    """The SDK's connect errors as a sentence: ``RuntimeError: Failed client connect: …
    tonic::transport::Error(…)`` on the first probe, and on a client that had connected an
    ``RPCError`` the service is unavailable with (``tcp connect error`` once it is gone,
    ``transport error`` when it went away under a call)."""
    text = str(error)
    if "Failed client connect" not in text and not _unavailable(error):
        return None
    if "ConnectionRefused" in text or "Connection refused" in text:
        reason = "connection refused"
    elif "transport error" in text:
        reason = "connection lost"
    else:
        reason = "no connection"
    return f"the Temporal service does not answer ({reason})"


def _unavailable(error: Exception) -> bool:
    from temporalio.service import RPCError, RPCStatusCode

    return isinstance(error, RPCError) and error.status == RPCStatusCode.UNAVAILABLE


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:200]}" if text else type(error).__name__


class StoreCollector(Collector):
    """The store's figures as Prometheus metric families, read at each scrape."""

    def __init__(self, store: TaskStore, sandboxes: Callable[[], int]) -> None:
        self.store = store
        self.tally = census.Tally()
        self.sandboxes = sandboxes

    def collect(self) -> Iterable[Metric]:
        now = census.take(self.store)
        kinds, usage = self.tally.read(self.store)
        yield from _state_metrics(now)
        yield _gauge("errand_sandboxes_live", "Live sandboxes of this errand home.", self.sandboxes())
        yield from _event_metrics(kinds, usage.egress_refusals)
        yield from _usage_metrics(usage)


def _state_metrics(now: census.Census) -> Iterator[Metric]:
    tasks = GaugeMetricFamily("errand_tasks", "Tasks by state.", labels=["state"])
    for state, count in sorted(now.tasks_by_state.items()):
        tasks.add_metric([state], count)
    yield tasks
    yield _gauge("errand_queue_age_seconds", "How long the oldest queued task has waited (0: none queued).",
                 now.oldest_queued_age or 0.0)
    yield _gauge("errand_workers_live", "Workers holding a live lease on the store.", now.live_workers)
    yield _gauge("errand_runs_running", "Runs marked running.", now.running_runs)
    buckets = [(_le(bound), count) for bound, count in now.rounds.buckets] + [("+Inf", now.rounds.count)]
    yield HistogramMetricFamily("errand_run_duration_seconds", "Wall time of each ended run (an attempt of a round).",
                                buckets=buckets, sum_value=now.rounds.total_seconds)


def _event_metrics(kinds: dict[str, int], egress_refusals: int) -> Iterator[Metric]:
    by_kind = CounterMetricFamily("errand_events", "Events written to tasks' logs, by kind.", labels=["kind"])
    for kind, count in sorted(kinds.items()):
        by_kind.add_metric([kind], count)
    yield by_kind
    yield CounterMetricFamily("errand_egress_refusals", "Connections the egress proxy refused (task sandboxes, "
                              "counted when each sandbox ends).", value=egress_refusals)
    yield CounterMetricFamily("errand_retries", "Retried calls (model calls).",
                              value=census.kinds_total(kinds, RETRIES))


def _usage_metrics(usage: census.ModelUsage) -> Iterator[Metric]:
    yield CounterMetricFamily("errand_model_calls", "Model calls made by tasks.", value=usage.calls)
    tokens = CounterMetricFamily("errand_model_tokens", "Model tokens used by tasks.", labels=["direction"])
    tokens.add_metric(["input"], usage.input_tokens)
    tokens.add_metric(["output"], usage.output_tokens)
    yield tokens
    yield CounterMetricFamily("errand_model_cost_usd", "What tasks' model calls cost, in US dollars (priced calls).",
                              value=usage.cost)


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _le(bound: float) -> str:
    return f"{bound:g}"


def live_sandboxes() -> int:
    """This home's live sandboxes (the call is cheap: a directory listing of records)."""
    return len(asyncio.run(AsyncSandbox.list()))


def registry_for(store: TaskStore) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store, live_sandboxes))
    return registry
