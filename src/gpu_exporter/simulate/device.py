"""Per-device entry points: identity, PCI, memory and utilisation (thermals, power and clocks are in
:mod:`.sensors`, PCIe links and memory errors in :mod:`.reliability`). Each reads one
``gpuN.<key>`` in NVML's unit; an absent key is ``NOT_SUPPORTED``."""

from __future__ import annotations

from typing import Any

from gpu_exporter.simulate import abi, errors
from gpu_exporter.simulate.call import Call, device

ABSURD_TEMPERATURE = 644245923  # what broken drivers have returned (gpuN.absurd = 1)
ABSURD_UTILIZATION = 4294967295
MEMORY_V2 = 0x02000028  # nvmlMemory_v2: sizeof(nvmlMemory_v2_t) | 2 << 24
TEMPERATURE_V1 = 0x0100000C  # nvmlTemperature_v1
MARGIN_TEMPERATURE_V1 = 0x01000008  # nvmlMarginTemperature_v1
CLOCK_EVENT_REASONS_ALL = 0x7FF  # nvmlClocksEventReasonAll: every reason up to Reliability


def absurd(c: Call) -> bool:
    return bool(c.u64("absurd"))


def _string(c: Call, key: str, buf: Any, length: Any) -> int:
    value = c.text(key)
    return errors.NOT_SUPPORTED if value is None else abi.put_string(buf, length, value)


@device("nvmlDeviceGetName", mig_ok=True)
def name(c: Call, buf: Any, length: Any) -> int:
    """A MIG device is named as the driver names it: ``"<parent name> MIG <profile>"``."""
    parent = c.text("name")
    if parent is None:
        return errors.NOT_SUPPORTED
    if c.mig < 0:
        return abi.put_string(buf, length, parent)
    profile = c.text(f"mig.{c.mig}.profile")
    return abi.put_string(buf, length, f"{parent} MIG {profile}" if profile is not None else f"{parent} MIG")


def uuid_of(c: Call, gpu: int, mig: int) -> str:
    """``gpuN.uuid`` / ``gpuN.mig.K.uuid`` or their defaults."""
    given = c.s.get(f"gpu{gpu}.uuid" if mig < 0 else f"gpu{gpu}.mig.{mig}.uuid")
    if given is not None:
        return given
    return f"GPU-00000000-0000-0000-0000-{gpu:012d}" if mig < 0 else f"MIG-00000000-0000-0000-{gpu:04d}-{mig:012d}"


def bus_id_of(c: Call, gpu: int) -> str:
    return c.s.get(f"gpu{gpu}.pci_bus_id") or f"00000000:{gpu:02X}:00.0"


def parse_bus_id(text: str) -> tuple[int, int, int, int] | None:
    """``DDDDDDDD:BB:DD.F``, ``DDDD:BB:DD.F`` or ``BB:DD.F`` (hex) → (domain, bus, device, function)."""
    head, dot, function = text.rpartition(".")
    parts = head.split(":") if dot else []
    if len(parts) == 2:
        parts.insert(0, "0")
    try:
        domain, bus, dev = (int(part, 16) for part in parts)
        return domain, bus, dev, int(function, 16)
    except ValueError:
        return None


@device("nvmlDeviceGetUUID", mig_ok=True)
def uuid(c: Call, buf: Any, length: Any) -> int:
    return abi.put_string(buf, length, uuid_of(c, c.gpu, c.mig))


@device("nvmlDeviceGetSerial")
def serial(c: Call, buf: Any, length: Any) -> int:
    return _string(c, "serial", buf, length)


@device("nvmlDeviceGetVbiosVersion")
def vbios(c: Call, buf: Any, length: Any) -> int:
    return _string(c, "vbios_version", buf, length)


@device("nvmlDeviceGetBoardPartNumber")
def part_number(c: Call, buf: Any, length: Any) -> int:
    return _string(c, "board_part_number", buf, length)


@device("nvmlDeviceGetMinorNumber")
def minor(c: Call, out: Any) -> int:
    if abi.target(out) is None:
        return errors.INVALID_ARGUMENT
    return abi.put(out, c.gpu) if c.text("minor_number") is None else c.out(out, "minor_number")


@device("nvmlDeviceGetIndex")
def index(c: Call, out: Any) -> int:
    return abi.put(out, c.gpu)


def _pci(c: Call, out: Any, legacy: bool) -> int:
    pci = abi.target(out)
    if pci is None:
        return errors.INVALID_ARGUMENT
    bus_id = bus_id_of(c, c.gpu)
    domain, bus, dev, _function = parse_bus_id(bus_id) or (0, 0, 0, 0)
    device_id = c.u64("pci.device_id")
    subsystem = c.u64("pci.subsystem_id")
    pci.busIdLegacy = f"{domain & 0xFFFF:04x}:{bus & 0xFF:02x}:{dev & 0xFF:02x}.0".encode()
    pci.domain, pci.bus, pci.device = domain, bus, dev
    pci.pciDeviceId = 0x233010DE if device_id is None else device_id & 0xFFFFFFFF
    if not legacy:
        pci.pciSubSystemId = (subsystem or 0) & 0xFFFFFFFF
        pci.busId = bus_id.encode()[:31]
    return errors.SUCCESS


@device("nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2")
def pci_info(c: Call, out: Any) -> int:
    return _pci(c, out, legacy=False)


@device("nvmlDeviceGetPciInfo")
def pci_info_legacy(c: Call, out: Any) -> int:
    return _pci(c, out, legacy=True)


def _memory(c: Call) -> tuple[int, int, int, int] | None:
    """(total, reserved, used, free); scenario ``memory.used`` has the v2 meaning (without reserved)."""
    if c.mig >= 0:
        total, used = c.u64(f"mig.{c.mig}.memory.total"), c.u64(f"mig.{c.mig}.memory.used")
        if total is None or used is None:
            return None
        return total, 0, used, max(total - used, 0)
    total, used = c.u64("memory.total"), c.u64("memory.used")
    if total is None or used is None:
        return None
    reserved = c.u64("memory.reserved") or 0
    free = c.u64("memory.free")
    return total, reserved, used, max(total - used - reserved, 0) if free is None else free


@device("nvmlDeviceGetMemoryInfo", mig_ok=True)
def memory_v1(c: Call, out: Any) -> int:
    """v1: used includes the reserved memory."""
    memory = abi.target(out)
    if memory is None:
        return errors.INVALID_ARGUMENT
    values = _memory(c)
    if values is None:
        return errors.NOT_SUPPORTED
    memory.total, memory.used, memory.free = values[0], values[2] + values[1], values[3]
    return errors.SUCCESS


@device("nvmlDeviceGetMemoryInfo_v2", mig_ok=True)
def memory_v2(c: Call, out: Any) -> int:
    memory = abi.target(out)
    if memory is None:
        return errors.INVALID_ARGUMENT
    if memory.version != MEMORY_V2:
        return errors.ARGUMENT_VERSION_MISMATCH
    values = _memory(c)
    if values is None:
        return errors.NOT_SUPPORTED
    memory.total, memory.reserved, memory.used, memory.free = values
    return errors.SUCCESS


@device("nvmlDeviceGetBAR1MemoryInfo")
def bar1(c: Call, out: Any) -> int:
    memory = abi.target(out)
    if memory is None:
        return errors.INVALID_ARGUMENT
    total, used = c.u64("bar1.total"), c.u64("bar1.used")
    if total is None or used is None:
        return errors.NOT_SUPPORTED
    memory.bar1Total, memory.bar1Used, memory.bar1Free = total, used, max(total - used, 0)
    return errors.SUCCESS


@device("nvmlDeviceGetUtilizationRates")
def utilization(c: Call, out: Any) -> int:
    rates = abi.target(out)
    if rates is None:
        return errors.INVALID_ARGUMENT
    if absurd(c):
        rates.gpu = rates.memory = ABSURD_UTILIZATION
        return errors.SUCCESS
    gpu, memory = c.u64("utilization.gpu"), c.u64("utilization.memory")
    if gpu is None or memory is None:
        return errors.NOT_SUPPORTED
    rates.gpu, rates.memory = gpu, memory
    return errors.SUCCESS


def _codec(c: Call, key: str, out: Any, period: Any) -> int:
    """Video engines: percent, with the driver's sampling period of about 167 ms."""
    if abi.target(out) is None or abi.target(period) is None:
        return errors.INVALID_ARGUMENT
    if absurd(c):
        abi.put(out, ABSURD_UTILIZATION)
    elif c.out(out, key) != errors.SUCCESS:
        return errors.NOT_SUPPORTED
    return abi.put(period, 167000)


@device("nvmlDeviceGetEncoderUtilization")
def encoder(c: Call, out: Any, period: Any) -> int:
    return _codec(c, "utilization.encoder", out, period)


@device("nvmlDeviceGetDecoderUtilization")
def decoder(c: Call, out: Any, period: Any) -> int:
    return _codec(c, "utilization.decoder", out, period)
