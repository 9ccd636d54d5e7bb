"""The NVML backend: the only code that imports ``pynvml`` (nvidia-ml-py).

It initialises NVML once and discovers GPUs and MIG devices (:mod:`.discovery`), reads the
catalogue's NVML sources as raw values and queues Xid events. NVML's vocabulary stops here:
``NVMLError_NotSupported`` and a missing symbol are reported as unsupported (the pipeline's memo
decides when to ask again); ``NVMLError_GpuIsLost`` becomes :class:`DeviceLost`;
``NVMLLibraryMismatchError`` (not an ``NVMLError``!) is treated like a missing function; init
failures become :class:`BackendUnavailable` with a hint a human can act on.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import pynvml

from gpu_exporter import model
from gpu_exporter.backends.base import (
    BackendUnavailable,
    DeviceIdentity,
    DeviceLost,
    Event,
    HostIdentity,
    RawReading,
    Request,
    WatchVerdict,
)
from gpu_exporter.backends.nvml.buffered import BufferedReads
from gpu_exporter.backends.nvml.discovery import host_identity, init, open_gpu, with_cc_mode, with_p2p
from gpu_exporter.backends.nvml.events import EventQueue, XidListener
from gpu_exporter.backends.nvml.fields import CALL, FieldBatcher, Outcome, Wanted
from gpu_exporter.backends.nvml.gpm import CALL as _GPM_CALL
from gpu_exporter.backends.nvml.gpm import GpmSampler, link_selector
from gpu_exporter.backends.nvml.prm import CALL as _PRM_CALL
from gpu_exporter.backends.nvml.prm import read_counters
from gpu_exporter.backends.nvml.processes import ProcessReader
from gpu_exporter.backends.nvml.raw import gpm_raw, link_raw, list_length, once, once_only, prm_raw
from gpu_exporter.backends.nvml.readers import (
    ARG_READERS,
    ERROR_KINDS,
    STRUCT_READERS,
    Handle,
    Raw,
)
from gpu_exporter.backends.nvml.rows import Row
from gpu_exporter.catalogue import MetricSpec, NvmlSource
from gpu_exporter.model import Entity

log = logging.getLogger(__name__)


_COMPUTE = "nvmlDeviceGetComputeRunningProcesses"
_FIELD_CALL = "nvmlDeviceGetFieldValues"  # the source of values NVML offers only as fields


#: Bound of the reused field-value candidates (entities × rows; cleared when exceeded).
_WANTED_ITEMS_MAX = 200_000
#: Bound of the kept splits of due rows (one per cadence pattern; cleared when exceeded).
_SPLITS_MAX = 256


class NvmlBackend:
    """GPU samples through NVML. ``open``, ``discover`` and ``read`` run on sampler threads (NVML
    is thread-safe); handles are swapped as whole dicts, so a read never sees a half-built map."""

    name = "nvml"
    # Utilisation, clocks and power come from the driver's sample buffers (an H200 keeps 14 s of
    # utilisation samples, 2.4 s of power), energy from its counter, Xids from its event thread: a read
    # every 5 s sees every utilisation sample (and the newest power ones), at a fifth of the calls.
    default_interval = 5.0

    def __init__(self, compat_identity: bool = True) -> None:
        """``compat_identity``: also read what only dcgm-exporter's names show (NVLink P2P status between
        every pair of GPUs, N × (N - 1) calls; the platform's placement; the confidential-compute mode)."""
        self._compat_identity = compat_identity
        self._handles: dict[str, Handle] = {}  # GPU uuid → handle
        self._mig_handles: dict[tuple[str, int], Handle] = {}  # (GPU uuid, MIG slot) → handle
        self._by_index: dict[int, DeviceIdentity] = {}  # last discovery, for GPUs lost since
        self._events = EventQueue()  # outlives every listener, so no event is lost to a rebuild
        self._processes = ProcessReader()
        self._fields = FieldBatcher()
        self._gpm = GpmSampler()
        self._buffers = BufferedReads()
        self._no_gpm_logged: set[str] = set()
        self._profiling_released = False  # a profiling pause: no GPM call until restored
        self._splits: dict[int, tuple[tuple[MetricSpec, ...], tuple[tuple[Row, ...], ...]]] = {}  # see _split
        self._wanted_items: dict[tuple[Entity, str, int | None], Wanted] = {}  # see _wanted
        self._listener: XidListener | None = None
        self._watch_events = False
        self._open = False

    def open(self, watch_events: bool) -> tuple[HostIdentity, Sequence[DeviceIdentity]]:
        """``nvmlInit``, then discovery (``nvmlDeviceGetCount``, handles, MIG devices), then events."""
        init()
        self._open = True
        self._watch_events = watch_events
        host = host_identity()
        try:
            devices = self.discover()
        except BackendUnavailable:
            self.close()
            raise
        return host, devices

    def discover(self) -> Sequence[DeviceIdentity]:
        """Enumerate GPUs by index. A GPU that cannot be opened now (lost) but was known at that
        index keeps its identity and handle, so it stays "lost" rather than "vanished"."""
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as err:
            raise BackendUnavailable("device_count_failed", f"nvmlDeviceGetCount failed: {err}") from err
        handles: dict[str, Handle] = {}
        mig_handles: dict[tuple[str, int], Handle] = {}
        devices = []
        for index in range(count):
            try:
                devices.append(open_gpu(index, handles, mig_handles, self._by_index.get(index), self._compat_identity))
            except pynvml.NVMLError as err:
                known = self._by_index.get(index)
                if known is None:
                    log.error("GPU %d could not be opened and is not monitored yet: %s", index, err)
                    continue
                devices.append(known)
                handles[known.uuid] = self._handles[known.uuid]
                mig_handles.update({key: h for key, h in self._mig_handles.items() if key[0] == known.uuid})
        changed = set(handles) != set(self._handles)
        if changed:  # P2P status is between pairs of GPUs: N x (N - 1) calls, only when the set changes
            devices = with_p2p(devices, handles) if self._compat_identity else devices
        devices = with_cc_mode(devices) if self._compat_identity else devices
        self._handles, self._mig_handles = handles, mig_handles
        self._buffers.buffers.forget(set(handles))
        self._by_index = {device.index: device for device in devices}
        # GPM sample buffers of GPUs and GPU instances gone from this enumeration are freed.
        self._gpm.retain(
            [device.uuid for device in devices]
            + [(device.uuid, mig.gpu_instance) for device in devices for mig in device.migs]
        )
        if self._watch_events and (changed or self._listener is None):
            self._restart_listener()
        return devices

    def _restart_listener(self) -> None:
        if self._listener is not None:
            self._listener.stop()
        self._listener = XidListener(self._handles, self._events)
        self._listener.start()

    def read(self, device: DeviceIdentity, request: Request) -> RawReading:
        """Raw values of the requested rows for one GPU, each of its NVLinks and MIG devices."""
        handle = self._handles.get(device.uuid)
        if handle is None:
            raise DeviceLost(f"{device.uuid} is no longer enumerated by NVML")
        reading = RawReading()
        gpu_rows, link_rows, mig_rows, process_rows = self._split(request.specs)
        gpu = model.gpu(device.index, device.uuid)
        asks = request.asks
        # The rows asked of each entity (the unsupported memo consulted once per pair and read).
        gpu_asked = [row for row in gpu_rows if asks(gpu.uid, row.key)]
        gpu_asked = self._buffers.take(reading, gpu, device, handle, gpu_asked, request.sampled)
        links = []
        for link in device.nvlinks if link_rows else ():
            entity = model.nvlink(device.index, device.uuid, link)
            links.append((link, entity, [row for row in link_rows if asks(entity.uid, row.key)]))
        # One field-value call for the GPU and all its NVLinks.
        wanted = self._wanted(gpu, gpu_asked)
        for link, entity, asked in links:
            wanted += self._wanted(entity, asked, link)
        batch = self._batch(reading, gpu, handle, wanted)
        # The process count and the process list share one nvmlDeviceGetComputeRunningProcesses.
        compute = once(self._processes.compute_processes)
        per_link = [
            link_selector(source.selector, link)
            for link, _e, asked in links
            for *_, source in asked
            if source.call == _GPM_CALL
        ]
        gpm = self._gpm_reader(
            device, device.uuid, gpu_asked, lambda sample: pynvml.nvmlGpmSampleGet(handle, sample), per_link
        )
        self._read_into(reading, gpu, handle, gpu_asked, batch, compute=compute, gpm=gpm)
        # The PRM counters of all links asked: one nvmlDeviceReadPRMCounters_v1, made when first needed.
        prm_pairs = [
            (link, source.selector) for link, _e, asked in links for *_, source in asked if source.call == _PRM_CALL
        ]
        prm = once(functools.partial(read_counters, asked=prm_pairs))
        for link, entity, asked in links:
            self._read_into(reading, entity, handle, asked, batch, link, prm=prm, gpm=gpm)
        instances = {}
        mig_gpm: dict[int, Callable[[], Any]] = {}  # one GPM sample per GPU instance, shared by its compute instances
        for slot, mig in enumerate(device.migs):
            entity = model.mig(
                device.index, device.uuid, mig.gpu_instance, mig.compute_instance, mig.profile, mig.uuid, mig.name
            )
            instances[(mig.gpu_instance, mig.compute_instance)] = entity
            mig_handle = self._mig_handles.get((device.uuid, slot))
            if mig_handle is not None:
                asked = [row for row in mig_rows if asks(entity.uid, row.key)]
                mig_batch = self._batch(reading, entity, mig_handle, self._wanted(entity, asked))
                if mig.gpu_instance not in mig_gpm:
                    mig_gpm[mig.gpu_instance] = self._gpm_reader(
                        device, (device.uuid, mig.gpu_instance), mig_rows,
                        functools.partial(pynvml.nvmlGpmMigSampleGet, handle, mig.gpu_instance),
                    )  # fmt: skip
                self._read_into(reading, entity, mig_handle, asked, mig_batch, gpm=mig_gpm[mig.gpu_instance])
        if process_rows:
            self._processes.read(reading, gpu, handle, instances, [row.spec for row in process_rows], request, compute)
        return reading

    def _gpm_reader(
        self,
        device: DeviceIdentity,
        key: Any,
        rows: Sequence[Row],
        take: Callable[[Any], object],
        per_link: Sequence[str] = (),
    ) -> Callable[[], Any]:
        """The entity's GPM read of this read (one sample, made when a GPM row first needs it); ``per_link``
        adds the NVLinks' metrics of a GPU."""
        selectors = [row.source.selector for row in rows if row.source.call == _GPM_CALL] + list(per_link)
        if selectors and device.gpm_supported is False and device.uuid not in self._no_gpm_logged:
            self._no_gpm_logged.add(device.uuid)
            log.info(
                "GPU %d (%s): no GPM (nvmlGpmQueryDeviceSupport says not supported; Hopper or later needed): "
                "SM activity, occupancy, pipe and engine activity are not reported for it", device.index, device.name
            )  # fmt: skip

        def read() -> dict[str, Any]:
            if device.gpm_supported is False:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
            if self._profiling_released:
                return {}  # a read asked before the pause began: nothing, and no GPM call
            return self._gpm.read(key, take, selectors)

        return once_only(read)

    def _split(self, specs: tuple[MetricSpec, ...]) -> tuple[tuple[Row, ...], ...]:
        """The due rows with an NVML source, for GPUs, NVLinks, MIG devices and processes, worked out
        once per tuple of due rows (the plan hands every read of the same cadences the same tuple;
        the entry keeps it alive, so its id is never reused)."""
        known = self._splits.get(id(specs))
        if known is None:
            rows = [Row(spec, spec.key, spec.nvml) for spec in specs if spec.nvml is not None]
            split = tuple(
                tuple(row for row in rows if kind in row.spec.entities) for kind in ("gpu", "nvlink", "mig", "process")
            )
            if len(self._splits) >= _SPLITS_MAX:
                self._splits.clear()
            known = self._splits[id(specs)] = (specs, split)
        return known[1]

    def _wanted(self, entity: Entity, rows: Sequence[Row], link: int | None = None) -> list[Wanted]:
        """The rows asked of ``entity`` as candidates for the field-value call (each (entity, row,
        link) item made once and reused: the same every read)."""
        made = self._wanted_items
        wanted = []
        for spec, row, source in rows:
            item = made.get((entity, row, link))
            if item is None:
                if len(made) >= _WANTED_ITEMS_MAX:
                    made.clear()
                item = made[(entity, row, link)] = Wanted.of(entity, spec, row, source, link)
            wanted.append(item)
        return wanted

    def _batch(
        self, reading: RawReading, entity: Entity, handle: Handle, wanted: Sequence[Wanted]
    ) -> dict[tuple[str, str], Outcome]:
        """The one ``nvmlDeviceGetFieldValues`` of a handle; its time is shared among the values' collectors."""
        started = time.perf_counter()
        try:
            outcomes, asked = self._fields.read(handle, wanted)
        except pynvml.NVMLError_GpuIsLost as err:
            raise DeviceLost(f"{entity.uid}: {err}") from err
        if asked:
            share = (time.perf_counter() - started) / len(asked)
            for item in asked:
                reading.spent(item.spec.collector, share)
        return outcomes

    def _read_into(
        self,
        reading: RawReading,
        entity: Entity,
        handle: Handle,
        rows: Sequence[Row],
        batch: dict[tuple[str, str], Outcome],
        link: int | None = None,
        compute: Callable[[Handle], Any] | None = None,
        prm: Callable[[Handle], Any] | None = None,
        gpm: Callable[[], Any] | None = None,
    ) -> None:
        """Read the asked ``rows`` of one handle (of one of its NVLinks when ``link`` is given) for
        ``entity``; values in ``batch`` came with the handle's field-value call."""
        structs: dict[str, Raw | Exception] = {}
        out = reading.raw.setdefault(entity, {})
        uid = entity.uid
        for spec, row, source in rows:
            key = (uid, row)
            outcome = batch.get(key)
            if type(outcome) is float:  # came with the field-value call (its time counted there)
                out[row] = outcome
                continue
            read: Callable[[], float | None]
            if gpm is not None and source.call == _GPM_CALL:
                read = functools.partial(gpm_raw, gpm, source, link)
            elif link is None:
                read = functools.partial(self._raw, handle, source, structs, compute)
            elif prm is not None and source.call == _PRM_CALL:
                read = functools.partial(prm_raw, prm, handle, link, source)
            else:
                read = functools.partial(link_raw, handle, link, source)
            if outcome is not None:  # a field-only value's own call is that field again: nothing to recheck
                read = functools.partial(self._batched, outcome, key, read, source.call != _FIELD_CALL)
            started = time.perf_counter()
            raw = self._call(entity, spec, read, reading)
            reading.spent(spec.collector, time.perf_counter() - started)
            if raw is not None:
                out[row] = raw

    def _batched(
        self, outcome: Outcome, key: tuple[str, str], single: Callable[[], float | None], recheck: bool = True
    ) -> float | None:
        """A value from the field-value call, or from its own call where the field was no use (NOT_SUPPORTED
        is checked once against the call, unless ``recheck`` is False: the call is that same field)."""
        if isinstance(outcome, float):
            return outcome
        if outcome is CALL:
            return single()
        if recheck and isinstance(outcome, pynvml.NVMLError_NotSupported) and self._fields.check_unsupported(key):
            value = single()  # NOT_SUPPORTED here too: reported as unsupported by _call
            self._fields.use_call(key)
            return value
        assert isinstance(outcome, pynvml.NVMLError)
        raise outcome

    @staticmethod
    def _raw(
        handle: Handle,
        source: NvmlSource,
        structs: dict[str, Raw | Exception],
        compute: Callable[[Handle], Any] | None = None,
    ) -> float | None:
        """One raw value of a device-level source; struct calls are made once per read and shared
        (the process count with the process list, through ``compute``)."""
        if source.call not in STRUCT_READERS:
            return float(ARG_READERS[source.call](handle, source.selector))
        if source.call not in structs:
            reader = STRUCT_READERS[source.call]
            if source.call == _COMPUTE and compute is not None:
                reader = functools.partial(list_length, compute)
            try:
                structs[source.call] = reader(handle)
            except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError) as err:
                structs[source.call] = err
        result = structs[source.call]
        if isinstance(result, Exception):
            raise result
        value = result.get(source.selector)
        return None if value is None else float(value)

    def _call(
        self, entity: Entity, spec: MetricSpec, read: Callable[[], float | None], reading: RawReading
    ) -> float | None:
        """Run one vendor read and translate NVML's outcome: a raw value, or None when absent
        (unsupported answers are reported to the pipeline's memo; failures counted by kind).
        Raises DeviceLost."""
        source = spec.nvml
        assert source is not None
        try:
            return read()
        except pynvml.NVMLError_GpuIsLost as err:
            raise DeviceLost(f"{entity.uid}: {err}") from err
        except (
            pynvml.NVMLError_NotSupported,
            pynvml.NVMLError_FunctionNotFound,
            pynvml.NVMLLibraryMismatchError,
        ) as err:
            what = "not supported" if isinstance(err, pynvml.NVMLError_NotSupported) else f"unavailable ({err!r})"
            if source.call == _GPM_CALL:
                what += " (GPM needs a Hopper or later GPU, and a driver that offers it)"
            reading.unsupported.append((entity, spec.key, f"{source.call} is {what}"))
            return None
        except pynvml.NVMLError as err:
            reading.failed(ERROR_KINDS.get(err.value, "unknown"), spec.collector)
            log.debug("%s %s(%s) failed: %s", entity.uid, source.call, source.selector, err)
            return None

    def read_fabric(self, request: Request) -> RawReading:
        """NVML cannot see NVSwitches (DCGM reads them through the switch driver)."""
        return RawReading()

    def drain_events(self) -> list[Event]:
        """Xid and ECC events the listener queued since the last call."""
        return self._events.drain()

    def events_healthy(self) -> bool:
        """False when no listener runs or its last wait failed."""
        return self._listener is not None and self._listener.healthy

    def health_watch(self) -> WatchVerdict | None:
        """NVML has no health watches of its own: the health model judges what NVML shows."""
        return None

    def not_served(self) -> dict[str, int]:
        """NVML answers per call (not supported is per value): nothing is left unasked."""
        return {}

    def release_profiling(self, released: bool) -> None:
        """A profiling pause: no GPM call while released; the sample buffers are freed now, so the first
        value after it averages over one interval from a fresh sample, never over the pause."""
        self._profiling_released = released
        if released and self._open:
            self._gpm.close()

    def close(self) -> None:
        """Stop the event listener, then ``nvmlShutdown`` once per successful ``open``."""
        if self._listener is not None:
            self._listener.stop()
            self._listener = None
        if not self._open:
            return
        self._gpm.close()  # GPM sample buffers, before the library goes
        self._open = False
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as err:
            log.debug("nvmlShutdown failed: %s", err)
