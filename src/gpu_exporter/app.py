"""The ASGI application: ``/metrics``, the status page ``/`` and its JSON ``/api/v1/status``,
``/healthz`` and ``/readyz`` on starlette.

Handlers never call a GPU library: they read the sampler's latest snapshot (``/metrics`` encodes
its format on a worker thread when it is the first scrape of that snapshot to ask for it). The
lifespan owns the backend and the sampler (start, wait boundedly for the first cycle, stop).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Callable, Sequence

import anyio.to_thread
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from gpu_exporter.assemble import sampler_for
from gpu_exporter.assemble.backends import select
from gpu_exporter.assemble.control import control_server, node_labels
from gpu_exporter.backends.base import Backend
from gpu_exporter.catalogue import enabled_specs
from gpu_exporter.compat import releases
from gpu_exporter.compat.counters import Counter
from gpu_exporter.compat.plan import needed_collectors, plan
from gpu_exporter.config import Settings
from gpu_exporter.exposition.encoder import is_ready, negotiate, pick
from gpu_exporter.sampling.inventory import ExpectedGpus
from gpu_exporter.sampling.pause import Pauses
from gpu_exporter.sampling.sampler import STALE_INTERVALS, Sampler
from gpu_exporter.status import page
from gpu_exporter.status.cache import StatusCache
from gpu_exporter.status.history import History, Recorder
from gpu_exporter.status.view import status

log = logging.getLogger(__name__)

BackendFactory = Callable[[Settings], tuple[Backend, str]]


#: A scrape that finds the newest snapshot being encoded by another is answered with the previous
#: snapshot's bytes when they are at most this many intervals older (else it waits for the encoding).
PREVIOUS_SNAPSHOT_INTERVALS = 1.5


def create_app(
    settings: Settings, backend_factory: BackendFactory = select, compat: Sequence[Counter] | None = None
) -> Starlette:
    """Build the app; the backend is created and opened only when the lifespan starts. With
    ``compat`` (a counters list) snapshots are rendered under dcgm-exporter's names."""
    holder: dict[str, Sampler] = {}
    history = History()
    hostname = os.environ.get("NODE_NAME") or socket.gethostname()

    def sampler() -> Sampler:
        return holder["sampler"]

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        backend, reason = backend_factory(settings)
        log.info("backend %s chosen (%s)", backend.name, reason)
        collectors = settings.collectors
        if compat is not None:  # a field in the counters file turns on the collector it is read through,
            # unless that collector was switched off (or on) explicitly
            extra = needed_collectors(compat, backend.name) - collectors - settings.collectors_chosen
            if extra:
                log.info("the counters file's fields turn on the %s collector(s)", ", ".join(sorted(extra)))
            collectors |= extra
        specs = enabled_specs(collectors)
        fabric = [spec for spec in specs if spec.root == "fabric"]
        if fabric and not any(spec.source(backend.name) for spec in fabric):
            log.warning(
                "--collector.nvswitch needs the DCGM backend (%s cannot see NVSwitches): no NVSwitch series",
                backend.name,
            )
        compat_plan = None
        if compat is not None:  # the host label: as set, else the dcgm-exporter profile's
            label = settings.hostname_label or releases.BY_NAME[settings.dcgm_exporter_release].hostname_label
            compat_plan = plan(
                compat, specs, backend.name, "xid" in collectors, hostname, label, settings.dcgm_exporter,
                settings.dcgm_exporter_release,
            )  # fmt: skip
        pauses = Pauses()
        inventory = ExpectedGpus(settings.expected_gpus, settings.expected_gpus_label)
        running, attributor = sampler_for(
            settings, backend, reason, collectors, compat=compat_plan, pauses=pauses, inventory=inventory
        )
        holder["sampler"] = running
        control, labels = control_server(settings, pauses), node_labels(settings, pauses, inventory)
        if control is not None:
            await anyio.to_thread.run_sync(control.start)
        if labels is not None:
            attributor.report("kubernetes_node", labels)
            labels.start()
        attributor.start()
        running.start()
        # Bounded wait so the first scrape already has GPU data; a slow start still serves self-metrics.
        await anyio.to_thread.run_sync(running.first_cycle_done.wait, settings.collect_interval + 5.0)
        recorder = Recorder(history, lambda: running.snapshot, min(max(settings.collect_interval, 1.0), 5.0))
        recorder.start()
        try:
            yield
        finally:
            if labels is not None:
                await anyio.to_thread.run_sync(labels.stop)
            if control is not None:
                await anyio.to_thread.run_sync(control.stop)
            await anyio.to_thread.run_sync(recorder.stop)
            await anyio.to_thread.run_sync(running.stop)
            await anyio.to_thread.run_sync(attributor.stop)

    encoders: dict[str, anyio.CapacityLimiter] = {}
    # Per format (name, gzipped): the newest snapshot's bytes made so far, with its taken_at; and the
    # (snapshot, format) pairs being encoded now.
    encoded: dict[tuple[str, bool], tuple[float, bytes, str]] = {}
    encoding: set[tuple[int, str, bool]] = set()

    async def metrics(request: Request) -> Response:
        name, gzipped = negotiate(request.headers.get("accept", ""), request.headers.get("accept-encoding", ""))
        snapshot = sampler().snapshot
        rendered = snapshot.rendered
        last = encoded.get((name, gzipped))
        if is_ready(rendered, name, gzipped):
            body, content_type = pick(rendered, name, gzipped)
        elif (
            (id(rendered), name, gzipped) in encoding
            and last is not None
            and snapshot.taken_at - last[0] <= PREVIOUS_SNAPSHOT_INTERVALS * settings.collect_interval
        ):
            # Another scrape is encoding this snapshot: the previous one's bytes (one interval older)
            # answer now instead of waiting for it, so a scrape never queues behind an encoding.
            _taken_at, body, content_type = last
            log.debug("answered %s with the previous snapshot's bytes while this one is encoded", name)
        else:  # the first scrape of this snapshot in this format encodes it, off the event loop; one
            # thread at a time (encoding holds the GIL anyway): concurrent scrapes queue on the loop and
            # find the bytes made, instead of each parking a pool thread on the snapshot's lock
            limiter = encoders.get("limiter")
            if limiter is None:
                limiter = encoders["limiter"] = anyio.CapacityLimiter(1)
            key = (id(rendered), name, gzipped)
            encoding.add(key)
            try:
                body, content_type = await anyio.to_thread.run_sync(pick, rendered, name, gzipped, limiter=limiter)
            finally:
                encoding.discard(key)
            if last is None or last[0] < snapshot.taken_at:
                encoded[(name, gzipped)] = (snapshot.taken_at, body, content_type)
        headers = {"Vary": "Accept, Accept-Encoding"}
        if gzipped:
            headers["Content-Encoding"] = "gzip"
        return Response(body, headers=headers, media_type=content_type)

    async def health(_request: Request) -> Response:
        """dcgm-exporter's probe path (NVIDIA's Helm chart probes it): 200 "OK" with its headers, as
        dcgm-exporter answers; 503 "KO" only once the sampler has died (a restart is the cure)."""
        headers = {"X-Content-Type-Options": "nosniff"}
        if sampler().alive():
            return PlainTextResponse("OK", headers={**headers, "X-Registry-Available": "true"})
        return PlainTextResponse("KO", status_code=503, headers=headers)

    async def healthz(_request: Request) -> Response:
        if sampler().alive():
            return PlainTextResponse("ok\n")
        return PlainTextResponse("sampler is not running\n", status_code=503)

    async def readyz(_request: Request) -> Response:
        reason = not_ready_reason(sampler(), settings.collect_interval, settings.ready_without_gpus)
        if reason:
            return PlainTextResponse(f"not ready: {reason}\n", status_code=503)
        return PlainTextResponse("ready\n")

    def current() -> dict[str, object]:
        snapshot = sampler().snapshot
        history.record(snapshot)
        age = max(0.0, time.monotonic() - snapshot.taken_at)
        return status(snapshot, hostname, age, history.of)

    def build(kind: str) -> bytes:
        """One kind of status output for the current snapshot (on a worker thread: see StatusCache)."""
        if kind == "cards":
            return page.cards_html(current()).encode()
        if kind == "page":
            return page.page(current(), settings.telemetry_path).encode()
        return bytes(JSONResponse(current()).body)

    built = StatusCache(build)

    def key() -> tuple[int, int]:
        snapshot = sampler().snapshot
        return id(snapshot), int(max(0.0, time.monotonic() - snapshot.taken_at))

    async def landing(request: Request) -> Response:
        headers = {"Cache-Control": "no-store"}
        kind = "cards" if request.query_params.get("fragment") == "cards" else "page"
        return HTMLResponse(await built.get(kind, key()), headers=headers)

    async def api_status(_request: Request) -> Response:
        body = await built.get("json", key())
        return Response(body, media_type="application/json", headers={"Cache-Control": "no-store"})

    routes = [
        Route(settings.telemetry_path, metrics, methods=["GET"]),
        Route("/", landing, methods=["GET"]),
        Route("/api/v1/status", api_status, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


def not_ready_reason(sampler: Sampler, interval: float, ready_without_gpus: bool) -> str:
    """Empty when ready: backend up, and either at least one GPU sampled within the stale limit or,
    when allowed, no GPU at all."""
    snapshot = sampler.snapshot
    stats = snapshot.stats
    if not stats.backend_up:
        why = f": {stats.backend_problem}" if stats.backend_problem else ""  # in words, with the fix
        return f"{stats.backend} backend is down ({stats.backend_reason}){why}"
    if not snapshot.devices:
        return "" if ready_without_gpus else "no GPU found (start with --ready.without-gpus if that is expected)"
    if snapshot.sampled_gpus == 0:
        return f"no GPU sampled successfully in the last {STALE_INTERVALS * interval:g}s"
    return ""
