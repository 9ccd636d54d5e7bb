"""The ASGI application: ``/metrics``, ``/``, ``/healthz`` and ``/readyz`` on starlette.

Handlers never call a GPU library: they read the sampler's latest snapshot. The lifespan owns
the backend and the sampler (start, wait boundedly for the first cycle, stop).
"""

from __future__ import annotations

import contextlib
import html
import logging
import os
import socket
from collections.abc import AsyncIterator, Callable, Sequence

import anyio.to_thread
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route

from gpu_exporter import __version__
from gpu_exporter.attribution.join import attributor_for, known_gpus
from gpu_exporter.backends import select
from gpu_exporter.backends.base import Backend
from gpu_exporter.catalogue import enabled_specs
from gpu_exporter.compat import compat_renderer, plan
from gpu_exporter.config import Settings
from gpu_exporter.counters import Counter
from gpu_exporter.exposition import choose
from gpu_exporter.sampler import STALE_INTERVALS, Sampler

log = logging.getLogger(__name__)

BackendFactory = Callable[[Settings], tuple[Backend, str]]


def create_app(
    settings: Settings, backend_factory: BackendFactory = select, compat: Sequence[Counter] | None = None
) -> Starlette:
    """Build the app; the backend is created and opened only when the lifespan starts. With
    ``compat`` (a counters list) snapshots are rendered under dcgm-exporter's names."""
    holder: dict[str, Sampler] = {}

    def sampler() -> Sampler:
        return holder["sampler"]

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        backend, reason = backend_factory(settings)
        log.info("backend %s chosen (%s)", backend.name, reason)
        specs = enabled_specs(settings.collectors)
        fabric = [spec for spec in specs if spec.root == "fabric"]
        if fabric and not any(spec.source(backend.name) for spec in fabric):
            log.warning(
                "--collector.nvswitch needs the DCGM backend (%s cannot see NVSwitches): no NVSwitch series",
                backend.name,
            )
        watch_events = "xid" in settings.collectors
        renderer = None
        if compat is not None:
            hostname = os.environ.get("NODE_NAME") or socket.gethostname()
            renderer = compat_renderer(
                plan(compat, specs, backend.name, watch_events, hostname, settings.hostname_label)
            )
        attributor = attributor_for(settings, lambda: known_gpus(holder["sampler"].snapshot.devices))
        holder["sampler"] = running = Sampler(
            backend, specs, settings.collect_interval, reason, watch_events=watch_events, renderer=renderer,
            vanished_retention=settings.vanished_retention, unsupported_retry=settings.unsupported_retry,
            attributor=attributor,
        )  # fmt: skip
        attributor.start()
        running.start()
        # Bounded wait so the first scrape already has GPU data; a slow start still serves self-metrics.
        await anyio.to_thread.run_sync(running.first_cycle_done.wait, settings.collect_interval + 5.0)
        try:
            yield
        finally:
            await anyio.to_thread.run_sync(running.stop)
            await anyio.to_thread.run_sync(attributor.stop)

    async def metrics(request: Request) -> Response:
        body, content_type, gzipped = choose(
            sampler().snapshot.rendered,
            request.headers.get("accept", ""),
            request.headers.get("accept-encoding", ""),
        )
        headers = {"Vary": "Accept, Accept-Encoding"}
        if gzipped:
            headers["Content-Encoding"] = "gzip"
        return Response(body, headers=headers, media_type=content_type)

    async def healthz(_request: Request) -> Response:
        if sampler().alive():
            return PlainTextResponse("ok\n")
        return PlainTextResponse("sampler is not running\n", status_code=503)

    async def readyz(_request: Request) -> Response:
        reason = not_ready_reason(sampler(), settings.collect_interval, settings.ready_without_gpus)
        if reason:
            return PlainTextResponse(f"not ready: {reason}\n", status_code=503)
        return PlainTextResponse("ready\n")

    async def landing(_request: Request) -> Response:
        return HTMLResponse(landing_page(sampler(), settings))

    routes = [
        Route(settings.telemetry_path, metrics, methods=["GET"]),
        Route("/", landing, methods=["GET"]),
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
        return f"{stats.backend} backend is down ({stats.backend_reason})"
    if not snapshot.devices:
        return "" if ready_without_gpus else "no GPU found (start with --ready.without-gpus if that is expected)"
    if snapshot.sampled_gpus == 0:
        return f"no GPU sampled successfully in the last {STALE_INTERVALS * interval:g}s"
    return ""


def landing_page(sampler: Sampler, settings: Settings) -> str:
    """A small HTML page: version, backend, GPUs and links."""
    snapshot = sampler.snapshot
    stats = snapshot.stats
    rows = "".join(
        f"<tr><td>{device.identity.index}</td><td>{html.escape(device.identity.name)}</td>"
        f"<td><code>{html.escape(device.identity.uuid)}</code></td>"
        f"<td>{'up' if device.up else 'LOST'}{' (stalled)' if device.stalled else ''}</td></tr>"
        for device in snapshot.devices
    )
    path = html.escape(settings.telemetry_path)
    state = "up" if stats.backend_up else f"down ({html.escape(stats.backend_reason)})"
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>gpu-exporter</title></head><body>"
        f"<h1>gpu-exporter {html.escape(__version__)}</h1>"
        f"<p>Backend: {html.escape(stats.backend)}, {state}. "
        f"Driver {html.escape(snapshot.host.driver_version or 'unknown')}. "
        f"Sampling every {settings.collect_interval:g}s.</p>"
        f"<table><tr><th>GPU</th><th>Name</th><th>UUID</th><th>State</th></tr>{rows}</table>"
        f"<p><a href='{path}'>Metrics</a> · <a href='/healthz'>Health</a> · <a href='/readyz'>Readiness</a></p>"
        "</body></html>"
    )
