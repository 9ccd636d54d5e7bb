"""Backends by name: how each is built, and the ``--backend auto`` order. No other module branches
on a backend's name; a new backend (AMD, Intel) adds one entry here and its sources in the catalogue.

Vendor libraries load only when a backend is chosen (imports happen inside the factories).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

from gpu_exporter.backends.base import Backend, BackendUnavailable
from gpu_exporter.catalogue import enabled_specs
from gpu_exporter.config import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Choice:
    """A backend ready to open, and why it was chosen (for gpu_exporter_backend_info)."""

    backend: Backend
    reason: str


class Unsuitable(Exception):
    """A backend cannot be used here: ``summary`` in a few words, the message adds the fix."""

    def __init__(self, reason: str, summary: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.summary = summary


def _compat_identity(settings: Settings) -> bool:
    """Whether discovery reads what only dcgm-exporter's names show (P2P status, placement, CC mode)."""
    return settings.metric_names == "dcgm-exporter"


def _nvml(settings: Settings) -> Choice:
    from gpu_exporter.backends.nvml import NvmlBackend

    return Choice(NvmlBackend(_compat_identity(settings)), "")


def _dcgm(settings: Settings) -> Choice:
    """A connected DCGM backend that sees at least one GPU; raises Unsuitable otherwise."""
    from gpu_exporter.backends.dcgm import DcgmBackend, DcgmUnusable
    from gpu_exporter.backends.dcgm.adapter import load_adapter

    backend = DcgmBackend(
        load_adapter, enabled_specs(settings.collectors), settings.collect_interval, settings.dcgm_address,
        compat_identity=_compat_identity(settings),
    )  # fmt: skip
    try:
        mode, gpus = backend.probe()
    except DcgmUnusable as err:
        if err.reason == "dcgm_no_values" and settings.backend == "dcgm":
            # Asked for by name: keep trying DCGM (the log and gpu_exporter_device_down say why it serves nothing).
            log.warning("--backend dcgm: %s; using it anyway, as asked", err)
            return Choice(backend, f"{backend.mode}; {err.summary}")
        raise Unsuitable(err.reason, err.summary, str(err)) from err
    if gpus == 0:
        backend.close()
        raise Unsuitable("no_gpu", f"DCGM ({mode}) sees no GPU", f"the host engine ({mode}) sees no GPU")
    return Choice(backend, mode)


def _simulate(settings: Settings) -> Choice:
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
    return Choice(NvmlBackend(_compat_identity(settings)), reason(settings.simulate))


def with_interval(settings: Settings, backend: Backend) -> Settings:
    """The settings with ``backend``'s read interval where --collect-interval was not given."""
    if settings.collect_interval_chosen:
        return settings
    return replace(settings, collect_interval=backend.default_interval)


#: Name → factory. ``auto`` tries them in this order and takes the first that can be used.
FACTORIES: dict[str, Callable[[Settings], Choice]] = {"dcgm": _dcgm, "nvml": _nvml}
#: Backends only ever chosen explicitly (``--simulate`` sets backend "simulate"), never by ``auto``.
EXPLICIT: dict[str, Callable[[Settings], Choice]] = {"simulate": _simulate}
#: The names ``--backend`` accepts.
NAMES: tuple[str, ...] = ("auto", *FACTORIES)


def select(settings: Settings) -> tuple[Backend, str]:
    """The backend for ``--backend`` and the reason it was chosen; raises BackendUnavailable when
    the requested backend cannot be used at all.

    ``auto`` uses DCGM when its bindings import, a host engine answers (``--dcgm.address``, else
    the local standalone engine, else an embedded one) and it sees at least one GPU; otherwise
    NVML, with the reason DCGM was passed over logged once and kept for gpu_exporter_backend_info.
    """
    name = settings.backend
    if name in EXPLICIT:
        try:
            choice = EXPLICIT[name](settings)
        except Unsuitable as err:
            raise BackendUnavailable(err.reason, str(err)) from err
        return choice.backend, choice.reason
    if name != "auto":
        try:
            choice = FACTORIES[name](settings)
        except Unsuitable as err:
            raise BackendUnavailable(err.reason, f"--backend {name}: DCGM cannot be used: {err}") from err
        return choice.backend, f"requested ({choice.reason})" if choice.reason else "requested"
    passed_over = ""
    for candidate, factory in FACTORIES.items():
        try:
            choice = factory(settings)
        except Unsuitable as err:
            log.info("not using %s: %s; trying the next backend", candidate.upper(), err)
            passed_over = passed_over or f"{candidate.upper()} not available ({err.summary})"
            if err.reason == "no_gpu":
                passed_over = f"{err.summary}"
            continue
        if not passed_over:
            return choice.backend, f"auto: {candidate.upper()} {choice.reason}".rstrip()
        return choice.backend, f"auto: {passed_over}"
    raise BackendUnavailable("no_backend", "no GPU backend can be used")
