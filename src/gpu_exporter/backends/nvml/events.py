"""Xid and ECC events through an NVML event set, counted on a thread of their own.

``nvmlEventSetWait`` blocks (it releases the GIL) for up to a second at a time, so the thread
notices :meth:`XidListener.stop` quickly and never spins. Every event is counted; the counts only
grow, so the sampler can export them as real counters.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

import pynvml

from gpu_exporter.backends.base import XidTally
from gpu_exporter.backends.nvml.readers import Handle

log = logging.getLogger(__name__)

_WAIT_MS = 1000
_XID = pynvml.nvmlEventTypeXidCriticalError
_ECC = {pynvml.nvmlEventTypeSingleBitEccError: "single_bit", pynvml.nvmlEventTypeDoubleBitEccError: "double_bit"}
_WANTED = _XID | pynvml.nvmlEventTypeSingleBitEccError | pynvml.nvmlEventTypeDoubleBitEccError


def _address(handle: Handle) -> int | None:
    return ctypes.cast(handle, ctypes.c_void_p).value


#: Recent Xids kept per GPU for windowed counts (dcgm-exporter's DCGM_EXP_XID_ERRORS_COUNT).
RECENT_SECONDS = 3600.0
_RECENT_MAX = 1000


@dataclass
class _Counts:
    xid: dict[int, int] = field(default_factory=dict)
    ecc: dict[str, int] = field(default_factory=dict)
    last_xid_at: float | None = None
    last_xid: int | None = None
    recent: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=_RECENT_MAX))


class XidListener:
    """Registers every GPU for Xid and ECC events and counts what ``nvmlEventSetWait`` delivers."""

    def __init__(self, handles: Mapping[str, Handle]) -> None:
        self._by_address = {_address(handle): uuid for uuid, handle in handles.items()}
        self._handles = dict(handles)
        self._counts: dict[str, _Counts] = {uuid: _Counts() for uuid in handles}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nvml-events", daemon=True)

    def start(self) -> None:
        """Create the event set, register each GPU (those that refuse are logged once), start waiting."""
        try:
            self._set = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as err:
            log.warning("Xid events unavailable (nvmlEventSetCreate: %s); gpu_xid_errors_total stays at 0", err)
            return
        for uuid, handle in self._handles.items():
            try:
                supported = int(pynvml.nvmlDeviceGetSupportedEventTypes(handle))
                pynvml.nvmlDeviceRegisterEvents(handle, supported & _WANTED, self._set)
            except pynvml.NVMLError as err:
                log.warning("%s: cannot listen for Xid events (%s)", uuid, err)
        self._thread.start()

    def stop(self) -> None:
        """End the wait loop (within one wait) and free the event set."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(_WAIT_MS / 1000 * 2)
        if hasattr(self, "_set") and not self._thread.is_alive():
            try:
                pynvml.nvmlEventSetFree(self._set)
            except pynvml.NVMLError as err:
                log.debug("nvmlEventSetFree: %s", err)

    def tallies(self) -> dict[str, XidTally]:
        """Counts so far per GPU uuid (copies: the caller may keep them)."""
        with self._lock:
            return {
                uuid: XidTally(
                    dict(counts.xid), dict(counts.ecc), counts.last_xid_at, counts.last_xid, tuple(counts.recent)
                )
                for uuid, counts in self._counts.items()
            }

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                data = pynvml.nvmlEventSetWait(self._set, _WAIT_MS)
            except pynvml.NVMLError_Timeout:
                continue
            except pynvml.NVMLError as err:
                failures += 1
                if failures == 1:
                    log.error("waiting for Xid events failed: %s (retrying every second)", err)
                self._stop.wait(1.0)
                continue
            failures = 0
            self._count(data)

    def _count(self, data: object) -> None:
        uuid = self._by_address.get(_address(data.device))  # type: ignore[attr-defined]
        if uuid is None:
            return
        kind = int(data.eventType)  # type: ignore[attr-defined]
        with self._lock:
            counts = self._counts[uuid]
            if kind & _XID:
                code = int(data.eventData)  # type: ignore[attr-defined]
                counts.xid[code] = counts.xid.get(code, 0) + 1
                now = time.time()
                counts.last_xid_at, counts.last_xid = now, code
                counts.recent.append((now, code))
                while counts.recent and counts.recent[0][0] < now - RECENT_SECONDS:
                    counts.recent.popleft()
                log.warning("%s: Xid %d", uuid, code)
            for bit, name in _ECC.items():
                if kind & bit:
                    counts.ecc[name] = counts.ecc.get(name, 0) + 1
