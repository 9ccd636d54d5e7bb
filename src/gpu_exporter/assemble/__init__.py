"""The composition root: the one place that wires backends (:mod:`.backends`), attribution sources
(:mod:`.attribution`), the sampler's consumers and the app's parts together; the daemon, ``snapshot``
and ``doctor`` build their sampler here, once.

The sampler imports none of its consumers; this module chooses them: the renderer (gpu-exporter's
own names, or dcgm-exporter's from a compatibility plan), what that renderer needs the sampler to
remember (:class:`~gpu_exporter.sampling.consumers.Memory`), and the attribution the settings ask for.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from gpu_exporter.assemble.attribution import attributor_for
from gpu_exporter.attribution.join import Attributor, known_gpus
from gpu_exporter.backends.base import Backend
from gpu_exporter.catalogue import FULL, Detail, MetricSpec, enabled_specs
from gpu_exporter.compat.plan import CompatPlan
from gpu_exporter.compat.render import compat_renderer
from gpu_exporter.config import Settings
from gpu_exporter.exposition.render import native_renderer
from gpu_exporter.sampling.consumers import NATIVE, Memory
from gpu_exporter.sampling.inventory import ExpectedGpus
from gpu_exporter.sampling.pause import Pauses
from gpu_exporter.sampling.sampler import REDISCOVER_SECONDS, Sampler
from gpu_exporter.sampling.snapshot import Renderer


def rendering(specs: Sequence[MetricSpec], compat: CompatPlan | None, detail: Detail = FULL) -> tuple[Renderer, Memory]:
    """The renderer for ``compat`` (dcgm-exporter's names) or, without one, gpu-exporter's own at
    ``detail`` (``--metrics.detail``), and what it needs remembered."""
    if compat is None:
        return native_renderer(specs, detail), NATIVE
    return compat_renderer(compat), compat.memory


def sampler_for(
    settings: Settings,
    backend: Backend,
    reason: str,
    collectors: frozenset[str],
    *,
    interval: float | None = None,
    compat: CompatPlan | None = None,
    pauses: Pauses | None = None,
    inventory: ExpectedGpus | None = None,
) -> tuple[Sampler, Attributor]:
    """The sampler the settings describe for ``collectors`` (the settings' own, or more where a
    counters list asks for them), with the attribution the settings ask for (started by the caller).
    ``interval`` overrides ``--collect-interval`` (``snapshot --watch``); ``pauses`` holds the pause asked
    of the daemon (its control socket); ``inventory`` the expected GPU count (else ``--expected-gpus``)."""
    specs = enabled_specs(collectors)
    holder: list[Sampler] = []
    attributor = attributor_for(
        settings, lambda: known_gpus(holder[0].snapshot.devices), lambda: holder[0].snapshot.health
    )
    renderer, memory = rendering(specs, compat, settings.metrics_detail)
    sampler = Sampler(
        backend, specs, settings.collect_interval if interval is None else interval, reason,
        renderer=renderer, attribution=attributor, memory=memory, watch_events="xid" in collectors,
        vanished_retention=settings.vanished_retention, unsupported_retry=settings.unsupported_retry,
        rediscover_interval=settings.rediscover_interval, max_processes=settings.max_processes,
        expected_gpus=inventory if inventory is not None else settings.expected_gpus or None, pauses=pauses,
    )  # fmt: skip
    holder.append(sampler)
    return sampler, attributor


def bare_sampler(
    backend: Backend,
    specs: Sequence[MetricSpec],
    interval: float,
    reason: str,
    *,
    compat: CompatPlan | None = None,
    watch_events: bool = True,
    clock: Callable[[], float] = time.monotonic,
    rediscover_interval: float = REDISCOVER_SECONDS,
    expected_gpus: int | None = None,
    pauses: Pauses | None = None,
) -> Sampler:
    """A sampler without attribution sources (``doctor``, in-process tests): processes are listed
    and folded, never labelled with pods or jobs."""
    renderer, memory = rendering(specs, compat)
    return Sampler(
        backend, specs, interval, reason, renderer=renderer, attribution=Attributor(), memory=memory,
        watch_events=watch_events, clock=clock, rediscover_interval=rediscover_interval,
        expected_gpus=expected_gpus, pauses=pauses,
    )  # fmt: skip
