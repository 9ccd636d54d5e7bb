"""The NVML backend: the only code that imports ``pynvml`` (nvidia-ml-py).

It initialises NVML once, discovers GPUs and MIG devices, reads the catalogue's NVML sources as raw
values and queues Xid events. NVML's vocabulary stops here: ``NVMLError_NotSupported`` and a missing
symbol are reported as unsupported (the pipeline's memo decides when to ask again);
``NVMLError_GpuIsLost`` becomes :class:`DeviceLost`; ``NVMLLibraryMismatchError`` (not an
``NVMLError``!) is treated like a missing function; init failures become
:class:`BackendUnavailable` with a hint a human can act on.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pynvml

from gpu_exporter import model
from gpu_exporter.backends.base import (
    BackendUnavailable,
    DeviceIdentity,
    DeviceLost,
    Event,
    HostIdentity,
    MigIdentity,
    RawReading,
    Request,
)
from gpu_exporter.backends.nvml.events import EventQueue, XidListener
from gpu_exporter.backends.nvml.fields import CALL, FieldBatcher, Outcome, Wanted
from gpu_exporter.backends.nvml.processes import ProcessReader
from gpu_exporter.backends.nvml.readers import (
    ARG_READERS,
    ERROR_KINDS,
    LINK_READERS,
    MAX_LINKS,
    STRUCT_READERS,
    Handle,
    Raw,
    text,
)
from gpu_exporter.catalogue import MetricSpec, NvmlSource
from gpu_exporter.model import Entity

log = logging.getLogger(__name__)

# Init failures → (reason, what the operator should do).
_INIT_HINTS: dict[int, tuple[str, str]] = {
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: (
        "library_not_found",
        "libnvidia-ml.so.1 not found: install the NVIDIA driver, or in a container run with the NVIDIA "
        "container toolkit (docker --gpus all, or runtimeClassName: nvidia on Kubernetes)",
    ),
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: (
        "driver_not_loaded",
        "the NVIDIA kernel driver is not loaded: check 'lsmod | grep nvidia' and dmesg, then load it "
        "(modprobe nvidia) or reinstall the driver",
    ),
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: (
        "version_mismatch",
        "libnvidia-ml.so.1 and the loaded kernel module are different driver versions (usually after a "
        "driver upgrade): reboot, or reload the nvidia kernel modules",
    ),
    pynvml.NVML_ERROR_NO_PERMISSION: (
        "no_permission",
        "no permission to open /dev/nvidia*: run as root or as a member of the group owning /dev/nvidiactl; "
        "in a container, expose the devices (docker --gpus all, or the NVIDIA device plugin)",
    ),
}


def _link_raw(handle: Handle, link: int, source: NvmlSource) -> float:
    """One raw value of a per-NVLink source."""
    return float(LINK_READERS[source.call](handle, link, source.selector))


_COMPUTE = "nvmlDeviceGetComputeRunningProcesses"


def _once(call: Callable[[Handle], Any]) -> Callable[[Handle], Any]:
    """``call`` made at most once (its answer or its error kept), for one handle in one read."""
    kept: list[Any] = []

    def once(handle: Handle) -> Any:
        if not kept:
            try:
                kept.append(call(handle))
            except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError) as err:
                kept.append(err)
        if isinstance(kept[0], Exception):
            raise kept[0]
        return kept[0]

    return once


def _count(call: Callable[[Handle], Any], handle: Handle) -> Raw:
    return {"": len(call(handle))}


def _in_container_without_devices() -> bool:
    """True inside a container (Docker, Podman, Kubernetes) that was given no NVIDIA device nodes."""
    in_container = (
        Path("/.dockerenv").exists() or Path("/run/.containerenv").exists() or "KUBERNETES_SERVICE_HOST" in os.environ
    )
    return in_container and not Path("/dev/nvidiactl").exists()


class NvmlBackend:
    """GPU samples through NVML. ``open``, ``discover`` and ``read`` run on sampler threads (NVML
    is thread-safe); handles are swapped as whole dicts, so a read never sees a half-built map."""

    name = "nvml"

    def __init__(self) -> None:
        self._handles: dict[str, Handle] = {}  # GPU uuid → handle
        self._mig_handles: dict[tuple[str, int], Handle] = {}  # (GPU uuid, MIG slot) → handle
        self._by_index: dict[int, DeviceIdentity] = {}  # last discovery, for GPUs lost since
        self._events = EventQueue()  # outlives every listener, so no event is lost to a rebuild
        self._processes = ProcessReader()
        self._fields = FieldBatcher()
        self._rows: dict[int, tuple[MetricSpec, str, NvmlSource | None]] = {}  # id(spec) → spec, key, source
        self._listener: XidListener | None = None
        self._watch_events = False
        self._open = False

    def open(self, watch_events: bool) -> tuple[HostIdentity, Sequence[DeviceIdentity]]:
        """``nvmlInit``, then discovery (``nvmlDeviceGetCount``, handles, MIG devices), then events."""
        self._init()
        self._open = True
        self._watch_events = watch_events
        host = HostIdentity(
            driver_version=self._system(pynvml.nvmlSystemGetDriverVersion),
            cuda_version=self._cuda_version(),
            nvml_version=self._system(pynvml.nvmlSystemGetNVMLVersion),
        )
        try:
            devices = self.discover()
        except BackendUnavailable:
            self.close()
            raise
        return host, devices

    def _init(self) -> None:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            reason, hint = _INIT_HINTS.get(err.value, ("init_failed", f"nvmlInit failed: {err}"))
            if (
                reason in ("library_not_found", "driver_not_loaded", "no_permission")
                and _in_container_without_devices()
            ):
                hint += (
                    "; this looks like a container without /dev/nvidia* device nodes: run it with the NVIDIA "
                    "container toolkit (docker --gpus all) or, on Kubernetes, request nvidia.com/gpu or use "
                    "runtimeClassName: nvidia"
                )
            raise BackendUnavailable(reason, hint) from err

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
                devices.append(self._discover(index, handles, mig_handles))
            except pynvml.NVMLError as err:
                known = self._by_index.get(index)
                if known is None:
                    log.error("GPU %d could not be opened and is not monitored yet: %s", index, err)
                    continue
                devices.append(known)
                handles[known.uuid] = self._handles[known.uuid]
                mig_handles.update({key: h for key, h in self._mig_handles.items() if key[0] == known.uuid})
        changed = set(handles) != set(self._handles)
        self._handles, self._mig_handles = handles, mig_handles
        self._by_index = {device.index: device for device in devices}
        if self._watch_events and (changed or self._listener is None):
            self._restart_listener()
        return devices

    def _restart_listener(self) -> None:
        if self._listener is not None:
            self._listener.stop()
        self._listener = XidListener(self._handles, self._events)
        self._listener.start()

    def _system(self, call: Callable[[], Any]) -> str:
        try:
            return text(call())
        except pynvml.NVMLError:
            return ""

    def _cuda_version(self) -> str:
        try:
            version = int(pynvml.nvmlSystemGetCudaDriverVersion())
        except pynvml.NVMLError:
            return ""
        return f"{version // 1000}.{version % 1000 // 10}"

    def _discover(
        self, index: int, handles: dict[str, Handle], mig_handles: dict[tuple[str, int], Handle]
    ) -> DeviceIdentity:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        uuid = text(pynvml.nvmlDeviceGetUUID(handle))
        handles[uuid] = handle

        def identity(call: Callable[[Handle], Any]) -> str:
            try:
                return text(call(handle))
            except pynvml.NVMLError:
                return ""

        mig_mode, migs = self._discover_migs(uuid, handle, mig_handles)
        return DeviceIdentity(
            index=index,
            uuid=uuid,
            name=identity(pynvml.nvmlDeviceGetName),
            pci_bus_id=identity(lambda h: pynvml.nvmlDeviceGetPciInfo(h).busId),
            serial=identity(pynvml.nvmlDeviceGetSerial),
            vbios_version=identity(pynvml.nvmlDeviceGetVbiosVersion),
            board_part_number=identity(pynvml.nvmlDeviceGetBoardPartNumber),
            minor_number=identity(pynvml.nvmlDeviceGetMinorNumber),
            mig_mode=mig_mode,
            migs=migs,
            nvlinks=self._discover_links(handle),
        )

    def _discover_links(self, handle: Handle) -> tuple[int, ...]:
        """NVLinks for which ``nvmlDeviceGetNvLinkState`` answers (GPUs without NVLink: none)."""
        links = []
        for link in range(MAX_LINKS):
            try:
                pynvml.nvmlDeviceGetNvLinkState(handle, link)
            except pynvml.NVMLError_GpuIsLost:
                raise
            except pynvml.NVMLError:
                continue
            links.append(link)
        return tuple(links)

    def _discover_migs(
        self, uuid: str, handle: Handle, mig_handles: dict[tuple[str, int], Handle]
    ) -> tuple[str, tuple[MigIdentity, ...]]:
        """``nvmlDeviceGetMigMode`` then each ``nvmlDeviceGetMigDeviceHandleByIndex`` slot."""
        try:
            current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
        except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError):
            return "", ()
        if current != pynvml.NVML_DEVICE_MIG_ENABLE:
            return "disabled", ()
        migs: list[MigIdentity] = []
        for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except pynvml.NVMLError_NotFound:
                continue
            name = text(pynvml.nvmlDeviceGetName(mig))
            # Drivers name MIG devices "<GPU name> MIG <profile>", e.g. "NVIDIA A100-SXM4-40GB MIG 1g.5gb".
            profile = name.rpartition(" MIG ")[2] if " MIG " in name else ""
            mig_handles[(uuid, len(migs))] = mig
            migs.append(
                MigIdentity(
                    gpu_instance=int(pynvml.nvmlDeviceGetGpuInstanceId(mig)),
                    compute_instance=int(pynvml.nvmlDeviceGetComputeInstanceId(mig)),
                    profile=profile,
                    uuid=text(pynvml.nvmlDeviceGetUUID(mig)),
                    name=name,
                )
            )
        return "enabled", tuple(migs)

    def read(self, device: DeviceIdentity, request: Request) -> RawReading:
        """Raw values of the requested rows for one GPU, each of its NVLinks and MIG devices."""
        handle = self._handles.get(device.uuid)
        if handle is None:
            raise DeviceLost(f"{device.uuid} is no longer enumerated by NVML")
        reading = RawReading()
        rows = [spec for spec in request.specs if self._row(spec)[1] is not None]
        gpu = model.gpu(device.index, device.uuid)
        gpu_rows = [spec for spec in rows if "gpu" in spec.entities]
        link_rows = [spec for spec in rows if "nvlink" in spec.entities]
        links = [
            (link, model.nvlink(device.index, device.uuid, link)) for link in (device.nvlinks if link_rows else ())
        ]
        # One field-value call for the GPU and all its NVLinks.
        wanted = self._wanted(gpu, gpu_rows, request)
        for link, entity in links:
            wanted += self._wanted(entity, link_rows, request, link)
        batch = self._batch(reading, gpu, handle, wanted)
        # The process count and the process list share one nvmlDeviceGetComputeRunningProcesses.
        compute = _once(self._processes.compute_processes)
        self._read_into(reading, gpu, handle, gpu_rows, request, batch, compute=compute)
        for link, entity in links:
            self._read_into(reading, entity, handle, link_rows, request, batch, link)
        mig_rows = [spec for spec in rows if "mig" in spec.entities]
        instances = {}
        for slot, mig in enumerate(device.migs):
            entity = model.mig(
                device.index, device.uuid, mig.gpu_instance, mig.compute_instance, mig.profile, mig.uuid, mig.name
            )
            instances[(mig.gpu_instance, mig.compute_instance)] = entity
            mig_handle = self._mig_handles.get((device.uuid, slot))
            if mig_handle is not None:
                mig_batch = self._batch(reading, entity, mig_handle, self._wanted(entity, mig_rows, request))
                self._read_into(reading, entity, mig_handle, mig_rows, request, mig_batch)
        process_rows = [spec for spec in rows if "process" in spec.entities]
        if process_rows:
            self._processes.read(reading, gpu, handle, instances, process_rows, request, compute)
        return reading

    def _row(self, spec: MetricSpec) -> tuple[str, NvmlSource | None]:
        """(row key, NVML source) of a catalogue row, computed once (both are properties that
        build their answer); the entry keeps ``spec`` alive, so its id is never reused."""
        known = self._rows.get(id(spec))
        if known is None:
            known = self._rows[id(spec)] = (spec, spec.key, spec.nvml)
        return known[1], known[2]

    def _wanted(
        self, entity: Entity, specs: Sequence[MetricSpec], request: Request, link: int | None = None
    ) -> list[Wanted]:
        """The rows of ``entity`` this read asks for, as candidates for the field-value call."""
        uid = entity.uid
        wanted = []
        for spec in specs:
            row, source = self._row(spec)
            if source is not None and request.asks(uid, row):
                wanted.append(Wanted(entity, spec, (uid, row), source, link))
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
        specs: Sequence[MetricSpec],
        request: Request,
        batch: dict[tuple[str, str], Outcome],
        link: int | None = None,
        compute: Callable[[Handle], Any] | None = None,
    ) -> None:
        """Read ``specs`` of one handle (of one of its NVLinks when ``link`` is given) for ``entity``;
        values in ``batch`` came with the handle's field-value call."""
        structs: dict[str, Raw | Exception] = {}
        out = reading.raw.setdefault(entity, {})
        uid = entity.uid
        for spec in specs:
            row, source = self._row(spec)
            if not request.asks(uid, row):
                continue
            key = (uid, row)
            outcome = batch.get(key)
            if type(outcome) is float:  # came with the field-value call (its time counted there)
                out[row] = outcome
                continue
            assert source is not None  # filtered by read()
            read: Callable[[], float | None] = (
                functools.partial(self._raw, handle, source, structs, compute)
                if link is None
                else functools.partial(_link_raw, handle, link, source)
            )
            if outcome is not None:
                read = functools.partial(self._batched, outcome, key, read)
            started = time.perf_counter()
            raw = self._call(entity, spec, read, reading)
            reading.spent(spec.collector, time.perf_counter() - started)
            if raw is not None:
                out[row] = raw

    def _batched(self, outcome: Outcome, key: tuple[str, str], single: Callable[[], float | None]) -> float | None:
        """A value from the field-value call, or from its own call where the field was no use."""
        if isinstance(outcome, float):
            return outcome
        if outcome is CALL:
            return single()
        if isinstance(outcome, pynvml.NVMLError_NotSupported) and self._fields.check_unsupported(key):
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
                reader = functools.partial(_count, compute)
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

    def close(self) -> None:
        """Stop the event listener, then ``nvmlShutdown`` once per successful ``open``."""
        if self._listener is not None:
            self._listener.stop()
            self._listener = None
        if not self._open:
            return
        self._open = False
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as err:
            log.debug("nvmlShutdown failed: %s", err)
