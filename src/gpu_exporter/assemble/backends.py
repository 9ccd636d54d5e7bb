"""Choosing the backend the settings ask for, from the backend registry's table
(:data:`gpu_exporter.backends.registry.KINDS`), or the simulated host of ``--simulate``.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from gpu_exporter.backends.base import Backend, BackendUnavailable
from gpu_exporter.backends.registry import KINDS, Choice, Unsuitable, compat_identity, kind
from gpu_exporter.config import Settings

log = logging.getLogger(__name__)


def _simulated(settings: Settings) -> Choice:
    """The ordinary NVML backend over the simulated NVML library of ``--simulate`` (installed into
    pynvml, so no ``libnvidia-ml.so.1`` is loaded). It reads the catalogue's NVML sources, so it is
    named ``nvml``; the reason (gpu_exporter_backend_info) says it is simulated."""
    from gpu_exporter.backends.nvml import NvmlBackend
    from gpu_exporter.simulate import install
    from gpu_exporter.simulate.builtins import reason, resolve

    try:
        install(resolve(settings.simulate))
    except ValueError as err:  # the file went away since the settings were checked
        raise Unsuitable("simulate_failed", "the scenario cannot be read", f"--simulate: use {err}") from err
    return Choice(NvmlBackend(compat_identity(settings)), reason(settings.simulate))


def with_interval(settings: Settings, backend: Backend) -> Settings:
    """The settings with ``backend``'s read interval where --collect-interval was not given."""
    if settings.collect_interval_chosen:
        return settings
    return replace(settings, collect_interval=backend.default_interval)


def select(settings: Settings) -> tuple[Backend, str]:
    """The backend for ``--backend`` and the reason it was chosen; raises BackendUnavailable when
    the requested backend cannot be used at all.

    ``auto`` uses DCGM when its bindings import, a host engine answers (``--dcgm.address``, else
    the local standalone engine, else an embedded one) and it sees at least one GPU; otherwise
    NVML, with the reason DCGM was passed over logged once and kept for gpu_exporter_backend_info.
    ``--simulate`` (backend "simulate", never chosen by ``auto``) serves a simulated host.
    """
    name = settings.backend
    if name == "simulate":
        try:
            choice = _simulated(settings)
        except Unsuitable as err:
            raise BackendUnavailable(err.reason, str(err)) from err
        return choice.backend, choice.reason
    if name != "auto":
        try:
            choice = kind(name).open(settings)
        except Unsuitable as err:
            raise BackendUnavailable(err.reason, f"--backend {name}: {name.upper()} cannot be used: {err}") from err
        return choice.backend, f"requested ({choice.reason})" if choice.reason else "requested"
    passed_over = ""
    for candidate in KINDS:
        try:
            choice = candidate.open(settings)
        except Unsuitable as err:
            log.info("not using %s: %s; trying the next backend", candidate.name.upper(), err)
            passed_over = passed_over or f"{candidate.name.upper()} not available ({err.summary})"
            if err.reason == "no_gpu":
                passed_over = f"{err.summary}"
            continue
        if not passed_over:
            return choice.backend, f"auto: {candidate.name.upper()} {choice.reason}".rstrip()
        return choice.backend, f"auto: {passed_over}"
    raise BackendUnavailable("no_backend", "no GPU backend can be used")
