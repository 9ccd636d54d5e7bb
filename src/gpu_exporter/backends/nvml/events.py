"""Xid and ECC events through an NVML event set, counted on a thread of their own.

``nvmlEventSetWait`` blocks (it releases the GIL) for up to a second at a time, so the thread
notices :meth:`XidListener.stop` quickly and never spins. Every event is queued for the pipeline,
which owns the counts, so rebuilding the listener (when GPUs join or leave) loses nothing.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections import deque
from collections.abc import Mapping

import pynvml

from gpu_exporter.backends.base import Event
from gpu_exporter.backends.nvml.readers import Handle

log = logging.getLogger(__name__)

_WAIT_MS = 1000
_XID = pynvml.nvmlEventTypeXidCriticalError
_ECC = {pynvml.nvmlEventTypeSingleBitEccError: "single_bit", pynvml.nvmlEventTypeDoubleBitEccError: "double_bit"}
_WANTED = _XID | pynvml.nvmlEventTypeSingleBitEccError | pynvml.nvmlEventTypeDoubleBitEccError


def _address(handle: Handle) -> int | None:
    return ctypes.cast(handle, ctypes.c_void_p).value


class EventQueue:
    """Events waiting for the pipeline; the listener appends, the sampler drains. ``deque`` appends
    and pops are atomic, so neither side ever waits for the other."""

    def __init__(self) -> None:
        self._queue: deque[Event] = deque(maxlen=_QUEUE_MAX)

    def put(self, event: Event) -> None:
        self._queue.append(event)

    def drain(self) -> list[Event]:
        out = []
        while True:
            try:
                out.append(self._queue.popleft())
            except IndexError:
                return out


#: Events kept while nobody drains them (a storm beyond this drops the oldest).
_QUEUE_MAX = 100_000


class XidListener:
    """Registers every GPU for Xid and ECC events and queues what ``nvmlEventSetWait`` delivers."""

    def __init__(self, handles: Mapping[str, Handle], queue: EventQueue) -> None:
        self._by_address = {_address(handle): uuid for uuid, handle in handles.items()}
        self._handles = dict(handles)
        self._queue = queue
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nvml-events", daemon=True)
        #: False while events cannot be received (no event set, or the last wait failed).
        self.healthy = False

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
        self.healthy = True
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

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                data = pynvml.nvmlEventSetWait(self._set, _WAIT_MS)
            except pynvml.NVMLError_Timeout:
                continue
            except pynvml.NVMLError as err:
                self.healthy = False
                failures += 1
                if failures == 1:
                    log.error("waiting for Xid events failed: %s (retrying every second)", err)
                self._stop.wait(1.0)
                continue
            failures = 0
            self.healthy = True
            self._count(data)

    def _count(self, data: object) -> None:
        uuid = self._by_address.get(_address(data.device))  # type: ignore[attr-defined]
        if uuid is None:
            return
        kind = int(data.eventType)  # type: ignore[attr-defined]
        now = time.time()
        if kind & _XID:
            self._queue.put(Event(uuid, now, xid=int(data.eventData)))  # type: ignore[attr-defined]
        for bit, name in _ECC.items():
            if kind & bit:
                self._queue.put(Event(uuid, now, ecc=name))
