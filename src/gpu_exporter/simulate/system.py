"""Host-level entry points: init and shutdown, error strings, driver and CUDA versions, process
names, device enumeration and look-ups, and the event sets that deliver scripted Xids
(``gpuN.xid = code@seconds,...``, each once per process; of a lost GPU, only those due by its loss)."""

from __future__ import annotations

import ctypes
import time
from typing import Any

from gpu_exporter.simulate import abi, errors
from gpu_exporter.simulate.call import Call, prologue, raw, system
from gpu_exporter.simulate.device import bus_id_of, parse_bus_id, uuid_of
from gpu_exporter.simulate.library import EventSet, Library
from gpu_exporter.simulate.scenario import MAX_GPUS, parse_float, parse_uint

XID_EVENT = 0x8  # nvmlEventTypeXidCriticalError
#: Single/double-bit ECC, PState, Xid and clock events: what the simulated GPUs can register.
SUPPORTED_EVENTS = 0x1 | 0x2 | 0x4 | XID_EVENT | 0x10
NO_INSTANCE = 0xFFFFFFFF


@raw("nvmlInitWithFlags", "nvmlInit_v2", "nvmlInit")
def init(lib: Library, symbol: str, *_flags: Any) -> int:
    code = lib.init()
    lib.trace(symbol, -1)
    return code


@raw("nvmlShutdown")
def shutdown(lib: Library, symbol: str) -> int:
    lib.trace(symbol, -1)
    return lib.shutdown()


@raw("nvmlErrorString")
def error_string(lib: Library, symbol: str, code: Any) -> bytes:
    lib.trace(symbol, -1)
    return errors.text_of(abi.number(code))


@system("nvmlSystemGetDriverVersion")
def driver_version(c: Call, buf: Any, length: Any) -> int:
    return abi.put_string(buf, length, c.s.get("driver_version") or "999.99")


@system("nvmlSystemGetNVMLVersion")
def nvml_version(c: Call, buf: Any, length: Any) -> int:
    return abi.put_string(buf, length, c.s.get("nvml_version") or "13.999.99")


@system("nvmlSystemGetCudaDriverVersion", "nvmlSystemGetCudaDriverVersion_v2")
def cuda_version(c: Call, out: Any) -> int:
    if abi.target(out) is None:
        return errors.INVALID_ARGUMENT
    text = c.s.get("cuda_driver_version")
    value = 13000 if text is None else c.lib.uint_value("cuda_driver_version", text, c.t)
    return errors.NOT_SUPPORTED if value is None else abi.put(out, value)


@system("nvmlSystemGetConfComputeState")
def conf_compute_state(c: Call, out: Any) -> int:
    """``conf_compute.cc_feature`` (0/1), ``.environment``, ``.dev_tools_mode``: the system's
    confidential-compute state; without cc_feature NOT_SUPPORTED."""
    state = abi.target(out)
    if state is None:
        return errors.INVALID_ARGUMENT
    values = {}
    for key, default in (("cc_feature", None), ("environment", "0"), ("dev_tools_mode", "0")):
        text = c.s.get(f"conf_compute.{key}")
        text = default if text is None else text
        value = None if text is None else c.lib.uint_value(f"conf_compute.{key}", text, c.t)
        if value is None:
            return errors.NOT_SUPPORTED
        values[key] = value
    state.environment, state.ccFeature = values["environment"], values["cc_feature"]
    state.devToolsMode = values["dev_tools_mode"]
    return errors.SUCCESS


@system("nvmlSystemGetProcessName")
def process_name(c: Call, pid: Any, buf: Any, length: Any) -> int:
    """Searches the processes of every present GPU."""
    if buf is None:
        return errors.INVALID_ARGUMENT
    wanted = abi.number(pid)
    for gpu in range(c.lib.device_count(c.s, c.t)):
        keys = c.s.gpus.get(gpu)
        if keys is None or not c.lib.present(c.s, gpu, c.t):
            continue
        for k in sorted(keys.processes):
            key = f"gpu{gpu}.process.{k}.pid"
            if c.lib.uint_value(key, c.s.get(key), c.t) != wanted:
                continue
            name = c.s.get(f"gpu{gpu}.process.{k}.name")
            if name is not None:
                return abi.put_string(buf, length, name)
    return errors.NOT_FOUND


@system("nvmlDeviceGetCount_v2", "nvmlDeviceGetCount")
def device_count(c: Call, out: Any) -> int:
    if abi.target(out) is None:
        return errors.INVALID_ARGUMENT
    return abi.put(out, c.lib.device_count(c.s, c.t))


@raw("nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex")
def handle_by_index(lib: Library, symbol: str, index: Any, out: Any) -> int:
    """A device-level call keyed by index, so ``gpuN.error/delay.nvmlDeviceGetHandleByIndex`` apply."""
    number = abi.number(index)
    c = prologue(lib, symbol, number if number < MAX_GPUS else -1, -1, mig_ok=False, by_index=True)
    if isinstance(c, int):
        return c
    if out is None:
        return errors.INVALID_ARGUMENT
    abi.put_pointer(out, lib.handle(c.gpu))
    return errors.SUCCESS


@system("nvmlDeviceGetHandleByUUID")
def handle_by_uuid(c: Call, uuid: Any, out: Any) -> int:
    wanted = abi.get_string(uuid)
    if wanted is None or out is None:
        return errors.INVALID_ARGUMENT
    for gpu in range(c.lib.device_count(c.s, c.t)):
        if not c.lib.present(c.s, gpu, c.t):
            continue
        keys = c.s.gpus.get(gpu)
        for mig in [-1, *sorted(keys.mig if keys else ())]:
            if uuid_of(c, gpu, mig) == wanted:
                abi.put_pointer(out, c.lib.handle(gpu, mig))
                return errors.SUCCESS
    return errors.NOT_FOUND


@system("nvmlDeviceGetHandleByPciBusId_v2", "nvmlDeviceGetHandleByPciBusId")
def handle_by_bus_id(c: Call, bus_id: Any, out: Any) -> int:
    text = abi.get_string(bus_id)
    if text is None or out is None:
        return errors.INVALID_ARGUMENT
    wanted = parse_bus_id(text)
    for gpu in range(c.lib.device_count(c.s, c.t)):
        if not c.lib.present(c.s, gpu, c.t):
            continue
        have_text = bus_id_of(c, gpu)
        have = parse_bus_id(have_text)
        if (wanted == have) if wanted is not None and have is not None else have_text.lower() == text.lower():
            abi.put_pointer(out, c.lib.handle(gpu))
            return errors.SUCCESS
    return errors.NOT_FOUND


@system("nvmlEventSetCreate")
def event_set_create(c: Call, out: Any) -> int:
    if out is None:
        return errors.INVALID_ARGUMENT
    memory = ctypes.create_string_buffer(1)
    address = ctypes.addressof(memory)
    with c.lib.lock:
        c.lib.event_sets[address] = EventSet(memory=memory)
    abi.put_pointer(out, address)
    return errors.SUCCESS


@system("nvmlEventSetFree")
def event_set_free(c: Call, handle: Any) -> int:
    """Sets are only marked dead, so a wait racing with a free never finds a missing set."""
    with c.lib.lock:
        found = c.lib.event_sets.get(abi.address(handle) or 0)
        if found is None or not found.alive:
            return errors.INVALID_ARGUMENT
        found.alive = False
    return errors.SUCCESS


def _device_prologue(lib: Library, symbol: str, handle: Any) -> Call | int:
    gpu, mig = lib.decode(abi.address(handle))
    return prologue(lib, symbol, gpu, mig, mig_ok=False, by_index=False)


@raw("nvmlDeviceGetSupportedEventTypes")
def supported_events(lib: Library, symbol: str, handle: Any, out: Any) -> int:
    c = _device_prologue(lib, symbol, handle)
    return c if isinstance(c, int) else abi.put(out, SUPPORTED_EVENTS)


@raw("nvmlDeviceRegisterEvents")
def register_events(lib: Library, symbol: str, handle: Any, types: Any, event_set: Any) -> int:
    c = _device_prologue(lib, symbol, handle)
    if isinstance(c, int):
        return c
    mask = abi.number(types)
    if mask & ~SUPPORTED_EVENTS:
        return errors.NOT_SUPPORTED
    with lib.lock:
        found = lib.event_sets.get(abi.address(event_set) or 0)
        if found is None or not found.alive:
            return errors.INVALID_ARGUMENT
        found.masks[c.gpu] = found.masks.get(c.gpu, 0) | mask
    return errors.SUCCESS


def _next_xid(lib: Library, event_set: EventSet, t: float) -> tuple[int, int, int] | None:
    """The earliest due, undelivered Xid of a present GPU registered on the set. A GPU with ``lost_after``
    posts the Xids due up to the instant of its loss, and they wait in the set after it, as a driver
    posts Xid 79 while the GPU falls off the bus; one due after the loss is never posted."""
    s = lib.now()
    best: tuple[int, int, int] | None = None
    for gpu in range(lib.device_count(s, t)):
        if not event_set.masks.get(gpu, 0) & XID_EVENT or not lib.present(s, gpu, t):
            continue
        lost_after = lib.float_value(f"gpu{gpu}.lost_after", s.get(f"gpu{gpu}.lost_after"), t)
        listed = s.get(f"gpu{gpu}.xid")
        if listed is None:
            continue
        for item in listed.split(","):
            code_text, at, when_text = item.partition("@")
            if not at:
                lib.warn_once("xid", listed, "an item is not code@seconds; it is ignored")
                continue
            code, when = parse_uint(code_text.strip()), parse_float(when_text.strip())
            if code is None or when is None:
                continue
            due = int(when * 1e6)
            if when > t or (lost_after is not None and when > lost_after) or (gpu, code, due) in lib.delivered:
                continue
            if best is None or due < best[2]:
                best = (gpu, code, due)
    return best


@system("nvmlEventSetWait_v2", "nvmlEventSetWait")
def event_wait(c: Call, handle: Any, out: Any, timeout_ms: Any) -> int:
    """Waits in slices of at most 50 ms, so Xids falling due and scenario rewrites are noticed."""
    data = abi.target(out)
    if handle is None or data is None:
        return errors.INVALID_ARGUMENT
    lib = c.lib
    deadline = time.monotonic() + abi.number(timeout_ms) / 1000.0
    while True:
        with lib.lock:
            found = lib.event_sets.get(abi.address(handle) or 0)
            alive = found is not None and found.alive
        if found is None or not alive:
            return errors.INVALID_ARGUMENT
        xid = _next_xid(lib, found, lib.elapsed())
        if xid is not None:
            with lib.lock:
                fresh = xid not in lib.delivered
                lib.delivered.add(xid)
            if fresh:
                ctypes.memset(ctypes.addressof(data), 0, ctypes.sizeof(data))
                ctypes.memmove(
                    ctypes.addressof(data) + type(data).device.offset,
                    ctypes.byref(ctypes.c_void_p(lib.handle(xid[0]))),
                    ctypes.sizeof(ctypes.c_void_p),
                )
                data.eventType = XID_EVENT
                data.eventData = xid[1]
                data.gpuInstanceId = NO_INSTANCE
                data.computeInstanceId = NO_INSTANCE
                return errors.SUCCESS
            continue
        left = deadline - time.monotonic()
        if left <= 0:
            return errors.TIMEOUT
        time.sleep(min(left, 0.05))
