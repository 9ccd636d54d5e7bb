"""Profiling watches of one connection: watched per set of fields a GPU supports (so a mixed node
watches each model's own set); a module the engine has not loaded disables profiling with one log
line; a watch refused because the profiling lock is held or permission is missing is retried with
backoff (1 minute doubling to 10) while every other watch keeps working."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from gpu_exporter.backends.dcgm.errors import (
    DcgmConnectionLost,
    DcgmError,
    DcgmModuleNotLoaded,
    DcgmNoPermission,
    DcgmNotSupported,
    DcgmProfilingInUse,
)
from gpu_exporter.backends.dcgm.fields import is_profiling
from gpu_exporter.backends.dcgm.groups import Groups
from gpu_exporter.backends.dcgm.values import FE_GPU, FE_GPU_CI
from gpu_exporter.catalogue import MetricSpec

log = logging.getLogger(__name__)

#: How often a profiling watch that failed (lock held, no permission) is tried again.
PROFILING_RETRY_SECONDS = 60.0
#: Longest wait between two tries of a refused profiling watch.
PROFILING_RETRY_MAX_SECONDS = 600.0
PROFILING_FIXES = {
    "profiling_in_use": (
        "another profiler holds the GPU profiling lock (Nsight Systems/Compute, CUPTI, or a second DCGM host "
        "engine): run one shared nv-hostengine per node and point every DCGM client at it, or release the lock "
        "while profiling with 'dcgmi profile --pause' / '--resume'"
    ),
    "profiling_no_permission": (
        "the DCGM host engine may not use the profiling counters: run nv-hostengine as root (in a container, "
        "with CAP_SYS_ADMIN); before Hopper, the driver option NVreg_RestrictProfilingToAdminUsers=0 also works"
    ),
    "profiling_failed": "see the DCGM host engine's log (nv-hostengine.log) for why the profiling module failed",
    "module_not_loaded": "the host engine runs without its profiling module: start nv-hostengine without denying "
    "it (--denylist-modules), or see nv-hostengine.log for why it failed to load",
}


@dataclass
class Profiling:
    """Per-GPU profiling state: the wanted fields each GPU supports, and the watches that failed."""

    supported: dict[int, frozenset[int]] = field(default_factory=dict)  # DCGM GPU id → fields
    failing: dict[int, str] = field(default_factory=dict)  # DCGM GPU id → error kind
    pending: list[tuple[frozenset[int], tuple[int, ...]]] = field(default_factory=list)  # to watch again
    retry_at: float = 0.0
    delay: float = PROFILING_RETRY_SECONDS  # the wait after the next failed try


class ProfilingWatches(Groups):
    """The profiling watches of :class:`~gpu_exporter.backends.dcgm.watches.Watches`, which sets
    every attribute declared here in its ``__init__``."""

    _specs: Sequence[MetricSpec]
    _clock: Callable[[], float]
    _names: list[str]
    _serial: int
    profiling: Profiling

    def _watch_profiling(self) -> None:
        """Ask each GPU which profiling fields it supports (per GPU, so per model), group GPUs by
        that set and watch each set on its GPUs and their MIG instances."""
        wanted = frozenset(
            self.known_only(s.dcgm.field_id for s in self._specs if s.dcgm is not None and is_profiling(s))
        )
        if not wanted:
            return
        state = self.profiling
        by_fields: dict[frozenset[int], list[int]] = {}
        for uuid, gpu in self.topology.gpus.items():
            if gpu in self.topology.refused:
                continue
            try:
                supported = self._adapter.profiling_fields(gpu) & wanted
            except DcgmConnectionLost:
                raise
            except DcgmModuleNotLoaded as err:  # the engine's module is missing, not the GPU's support
                self._not_loaded(err)
                state.supported[gpu] = frozenset()
                continue
            except DcgmNotSupported:
                supported = frozenset()
            except DcgmError as err:
                self.profiling_failed([gpu], err)
                state.pending.append((wanted, (gpu,)))
                continue
            state.supported[gpu] = supported
            device = next((d for d in self.topology.devices if d.uuid == uuid), None)
            model = (device.name if device is not None else "") or uuid
            if not supported:
                self._once(f"prof-none {model}", "%s does not support DCGM profiling metrics; they stay absent", model)
            elif supported != wanted:
                listed = ",".join(map(str, sorted(supported)))
                self._once(f"prof-some {model}", "%s supports profiling fields %s only", model, listed)
            if supported:
                by_fields.setdefault(supported, []).append(gpu)
        state.pending += [(fields, tuple(gpus)) for fields, gpus in by_fields.items()]
        self.retry_profiling(force=True)

    def retry_profiling(self, force: bool = False) -> None:
        """Watch the pending profiling sets again (once a minute, or now with ``force``)."""
        state = self.profiling
        if not state.pending or (not force and self._clock() < state.retry_at):
            return
        pending, state.pending = state.pending, []
        for fields, gpus in pending:
            if not state.supported.keys() >= set(gpus):
                # The support query itself failed: ask again first.
                try:
                    for gpu in gpus:
                        state.supported[gpu] = self._adapter.profiling_fields(gpu) & fields
                except DcgmConnectionLost:
                    raise
                except DcgmError as err:
                    self.profiling_failed(list(gpus), err)
                    state.pending.append((fields, gpus))
                    continue
                fields = frozenset().union(*(state.supported[gpu] for gpu in gpus))
                if not fields:
                    continue
            self._serial += 1
            entities = [(FE_GPU, gpu) for gpu in gpus] + [
                (FE_GPU_CI, compute) for (uuid, _slot), compute in self.topology.migs.items()
                if self.topology.gpus[uuid] in gpus
            ]  # fmt: skip
            try:
                names = self._watch(f"prof{self._serial}", entities, sorted(fields), int(self._interval * 1e6),
                                    self.keep_age())  # fmt: skip
            except DcgmConnectionLost:
                raise
            except (DcgmModuleNotLoaded, DcgmNotSupported) as err:
                self._not_loaded(err)  # not available: no retry
                continue
            except DcgmError as err:
                self.profiling_failed(list(gpus), err)
                state.pending.append((fields, gpus))
                continue
            self._names += names
            for gpu in gpus:
                if state.failing.pop(gpu, None) is not None:
                    log.info("DCGM profiling metrics available again on GPU id %d", gpu)
        if state.pending:
            state.retry_at = self._clock() + state.delay
            state.delay = min(2 * state.delay, PROFILING_RETRY_MAX_SECONDS)
        else:
            state.delay = PROFILING_RETRY_SECONDS

    def _not_loaded(self, err: DcgmError) -> None:
        self._once(
            f"prof-unavailable {err.kind}", "DCGM profiling metrics are not available (%s): %s; they stay absent, "
            "nothing is retried. %s", err.kind, err, PROFILING_FIXES.get(err.kind, ""),
        )  # fmt: skip

    def profiling_failed(self, gpus: Iterable[int], err: DcgmError) -> None:
        if isinstance(err, DcgmProfilingInUse):
            kind = "profiling_in_use"
        elif isinstance(err, DcgmNoPermission):
            kind = "profiling_no_permission"
        else:
            kind = "profiling_failed"
        for gpu in gpus:
            self.profiling.failing[gpu] = kind
        self._once(
            kind, "DCGM profiling metrics unavailable (%s): %s; other metrics are unaffected. Fix: %s",
            kind, err, PROFILING_FIXES[kind], level=logging.WARNING,
        )  # fmt: skip
