"""A ``--simulate`` host in process: the ordinary NVML backend over the simulated library, chosen
and composed as the command composes it, stepped a few cycles synchronously. The simulated library
replaces pynvml's for the whole process, so :func:`simulated` puts the one before back."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from gpu_exporter.assemble import bare_sampler
from gpu_exporter.assemble.backends import select, with_interval
from gpu_exporter.catalogue import enabled_specs
from gpu_exporter.cli import parse_settings
from gpu_exporter.sampling.snapshot import Snapshot


@contextmanager
def simulated() -> Iterator[None]:
    import pynvml

    saved = pynvml.nvmlLib
    try:
        yield
    finally:
        with pynvml.libLoadLock:
            pynvml.nvmlLib = saved
            pynvml._nvmlGetFunctionPointer_cache.clear()  # symbols resolved against the simulated library


def cycles(count: int, *flags: str) -> list[Snapshot]:
    """``count`` cycles' snapshots of ``gpu-exporter --simulate`` with ``flags`` (default: the default host)."""
    with simulated():
        settings = parse_settings(["--simulate", *flags], {})
        backend, reason = select(settings)
        settings = with_interval(settings, backend)
        sampler = bare_sampler(backend, enabled_specs(settings.collectors), settings.collect_interval, reason)
        try:
            return [sampler.run_cycle() for _ in range(count)]
        finally:
            sampler.stop()
