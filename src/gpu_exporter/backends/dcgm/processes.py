"""Processes on each GPU through DCGM, as the same process entities and rows the NVML backend
gives (``gpu_processes``, ``gpu_process_memory_used_bytes``, ``gpu_process_sm_utilization_ratio``,
``gpu_process_memory_utilization_ratio``), so attribution, the per-process series and the ledger
work unchanged.

Each cycle the fabric worker (the backend's host-wide duties, a worker of its own) reads one window:
the pid list samples and SM sample count since the last read (one ``dcgmGetValuesSince_v2``), then the
window's job statistics (``dcgmJobGetStats``), starts the next window's job and removes the last
one (:mod:`.pidvalues` says what each value is). A window in which the engine did not update a GPU (a read
before its next update) keeps that GPU's previous processes, for one window. The per-GPU reads only
copy the newest table: no
process call runs on a GPU's read, so a slow or hung one never stalls a GPU, and a table older than
:data:`STALE_INTERVALS` collect intervals gives no processes rather than old ones.

Failures: a refused watch or job call is counted (``processes``), logged once, and set up again after
:data:`RETRY_SECONDS`; processes are absent meanwhile. The group is named after the watches'
generation (``gpu-exporter-…-pids``), so a restarted exporter removes a predecessor's group with the
others; its jobs stay in the engine until it restarts (DCGM has no call listing jobs), one record each.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from gpu_exporter import model
from gpu_exporter.backends.base import RawReading
from gpu_exporter.backends.dcgm.errors import DcgmConnectionLost, DcgmError
from gpu_exporter.backends.dcgm.pidvalues import ProcessValues, translate
from gpu_exporter.backends.dcgm.protocol import DcgmAdapter
from gpu_exporter.catalogue import MetricSpec
from gpu_exporter.model import Entity

log = logging.getLogger(__name__)

#: A table older than this many collect intervals (at least the seconds below) is not used.
STALE_INTERVALS = 4
STALE_MIN_SECONDS = 5.0
#: How long after a failed setup or job call the watch is set up again.
RETRY_SECONDS = 60.0


def wanted(specs: Sequence[MetricSpec]) -> list[MetricSpec]:
    """The process rows of ``specs`` that DCGM serves (a ``call`` source on a process entity)."""
    return [s for s in specs if s.dcgm is not None and s.dcgm.call and "process" in s.entities]


class DcgmProcesses:
    """The newest window's processes per DCGM GPU id; refreshed by the fabric worker, read by the
    GPU workers (the table is swapped whole under a lock, never changed in place)."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._table: dict[int, dict[int, ProcessValues]] = {}
        self._at: float | None = None
        self._name = ""  # the watched group, "" while none
        self._job = ""  # the job of the window in progress
        self._serial = 0
        self._since = 0
        self._retry_at = 0.0
        self._logged = False
        self._carried: set[int] = set()  # GPU ids whose processes the last window carried over

    def refresh(self, adapter: DcgmAdapter, name: str, gpu_ids: Sequence[int], reading: RawReading) -> None:
        """One window: set up the watch on group ``name`` where it is new, else read the window since
        the last call and start the next. Raises DcgmConnectionLost; other errors are counted."""
        started = time.perf_counter()
        try:
            if name != self._name:
                self.drop(adapter)
                if not gpu_ids or self._clock() < self._retry_at:
                    return
                adapter.watch_processes(name, gpu_ids, int(self._interval * 1e6), max(3 * self._interval, 5.0))
                self._name = name
                self._since = adapter.process_samples(name, 0)[2]  # from now on
                self._job = self._start(adapter)
                return
            running, samples, self._since = adapter.process_samples(name, self._since)
            utilization = adapter.job_processes(self._job)
            previous, self._job = self._job, self._start(adapter)
            adapter.remove_job(previous)
            table = translate(running, samples, utilization)
            with self._lock:
                before = self._table
            # A window without any engine update of a GPU (our read came before the engine's next one)
            # keeps that GPU's previous processes, once; a second such window means none run.
            listed = {sample.gpu_id for sample in running}
            carried = {gpu for gpu in before if gpu not in listed and gpu not in self._carried}
            table.update({gpu: before[gpu] for gpu in carried})
            self._carried = carried
            with self._lock:
                self._table, self._at = table, self._clock()
        except DcgmConnectionLost:
            self._forget()
            raise
        except DcgmError as err:
            reading.failed(err.kind, "processes")
            if not self._logged:
                self._logged = True
                log.warning("DCGM process statistics failed: %s; per-process values are absent, tried again "
                            "in %.0f s", err, RETRY_SECONDS)  # fmt: skip
            self.drop(adapter)
            self._retry_at = self._clock() + RETRY_SECONDS
        finally:
            reading.spent("processes", time.perf_counter() - started)

    def _start(self, adapter: DcgmAdapter) -> str:
        self._serial += 1
        job = f"{self._name}-{self._serial}"[-63:]
        adapter.start_job(self._name, job)
        return job

    def _forget(self) -> None:
        """The engine's state is gone with the connection: set up anew next time."""
        self._name, self._job = "", ""
        with self._lock:
            self._table, self._at = {}, None

    def drop(self, adapter: DcgmAdapter) -> None:
        """Remove the job and the watch (a rebuild, a failure, closing); never raises but on a lost
        connection."""
        name, job = self._name, self._job
        self._forget()
        try:
            if job:
                adapter.remove_job(job)
            if name:
                adapter.unwatch(name)
        except DcgmConnectionLost:
            raise
        except DcgmError as err:
            log.debug("removing DCGM process watches: %s", err)

    def fill(self, reading: RawReading, gpu: Entity, gpu_id: int, specs: Sequence[MetricSpec]) -> None:
        """Add one entity per process of GPU ``gpu_id`` on ``gpu`` with the rows of ``specs`` (raw:
        bytes, percent), from the newest table; nothing where it is missing or stale."""
        with self._lock:
            table, at = self._table, self._at
        if at is None or self._clock() - at > max(STALE_INTERVALS * self._interval, STALE_MIN_SECONDS):
            return
        for pid, values in sorted(table.get(gpu_id, {}).items()):
            raw = reading.raw.setdefault(model.process(gpu, pid), {})
            # each row by what it is on NVML (its selector there: the same quantity)
            by_selector = {"count": 1.0, "used_memory": values.memory, "sm": values.sm, "mem": values.mem}
            for spec in specs:
                value = by_selector.get(spec.nvml.selector) if spec.nvml is not None else None
                if value is not None:
                    raw[spec.key] = value
