"""Backends by name, in one table: each entry gives a backend's name, its own options and how it is
built. ``--backend`` takes its choices from here and ``auto`` tries the entries in order; no other
module branches on a backend's name. A new backend (AMD, Intel) adds its package and one entry here.

Vendor libraries load only when a backend is built (imports happen inside the openers). Which backend
the settings choose is decided by the composition root (:mod:`gpu_exporter.assemble.backends`); the
settings reach a backend through :class:`BackendSettings`, which ``config.Settings`` satisfies.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from gpu_exporter.backends.base import Backend
from gpu_exporter.catalogue import enabled_specs
from gpu_exporter.options import Option, choice, optional_address

log = logging.getLogger(__name__)


class BackendSettings(Protocol):
    """The settings a backend's opener reads (fields of ``config.Settings``)."""

    @property
    def backend(self) -> str: ...
    @property
    def collectors(self) -> frozenset[str]: ...
    @property
    def collect_interval(self) -> float: ...
    @property
    def metric_names(self) -> str: ...
    @property
    def dcgm_address(self) -> str: ...


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


@dataclass(frozen=True)
class BackendKind:
    """One backend: its ``--backend`` name, a few words for ``--help``, its own options (their values
    reach the opener through the settings) and its opener, which raises :class:`Unsuitable` when the
    backend cannot be used here."""

    name: str
    summary: str
    open: Callable[[BackendSettings], Choice]
    options: tuple[Option, ...] = ()


def compat_identity(settings: BackendSettings) -> bool:
    """Whether discovery reads what only dcgm-exporter's names show (P2P status, placement, CC mode)."""
    return settings.metric_names == "dcgm-exporter"


def _nvml(settings: BackendSettings) -> Choice:
    from gpu_exporter.backends.nvml import NvmlBackend

    return Choice(NvmlBackend(compat_identity(settings)), "")


def _dcgm(settings: BackendSettings) -> Choice:
    """A connected DCGM backend that sees at least one GPU; raises Unsuitable otherwise."""
    from gpu_exporter.backends.dcgm import DcgmBackend, DcgmUnusable
    from gpu_exporter.backends.dcgm.adapter import load_adapter

    backend = DcgmBackend(
        load_adapter, enabled_specs(settings.collectors), settings.collect_interval, settings.dcgm_address,
        compat_identity=compat_identity(settings),
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


#: Every backend ``--backend`` can name; ``auto`` tries them in this order and takes the first that can be used.
KINDS: tuple[BackendKind, ...] = (
    BackendKind("dcgm", "DCGM when it can be imported and initialised", _dcgm, options=(
        Option("--dcgm.address", "dcgm_address", ("dcgm", "address"), optional_address,
               "HOST:PORT of a standalone nv-hostengine; empty (default) tries the local standalone engine, "
               "then an embedded one.", "HOST:PORT",
               aliases=("-r", "--remote-hostengine-info"), env_aliases=("DCGM_REMOTE_HOSTENGINE_INFO",)),
    )),
    BackendKind("nvml", "NVML", _nvml),
)  # fmt: skip
#: The names ``--backend`` accepts.
NAMES: tuple[str, ...] = ("auto", *(kind.name for kind in KINDS))
#: ``--backend`` and every backend's own options, for the option table (``config.OPTIONS``).
OPTIONS: tuple[Option, ...] = (
    Option("--backend", "backend", ("backend",), choice(*NAMES),
           f"GPU library: auto ({', else '.join(kind.summary for kind in KINDS)}), "
           f"{', '.join(NAMES[1:-1])} or {NAMES[-1]} (default auto).", "NAME"),
    *(option for kind in KINDS for option in kind.options),
)  # fmt: skip


def kind(name: str) -> BackendKind:
    """The backend called ``name`` (one of NAMES but ``auto``)."""
    return next(k for k in KINDS if k.name == name)
