"""Per-device entry points: identity, memory, utilisation, thermals, fans, power, clocks, PCIe,
ECC, row remapping and page retirement. Each reads one ``gpuN.<key>`` in NVML's unit; an absent
key is ``NOT_SUPPORTED``."""

from __future__ import annotations

import time
from typing import Any

from gpu_exporter.simulate import abi, errors
from gpu_exporter.simulate.call import Call, device

ABSURD_TEMPERATURE = 644245923  # what broken drivers have returned (gpuN.absurd = 1)
ABSURD_UTILIZATION = 4294967295
MEMORY_V2 = 0x02000028  # nvmlMemory_v2: sizeof(nvmlMemory_v2_t) | 2 << 24
TEMPERATURE_V1 = 0x0100000C  # nvmlTemperature_v1
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


def _gpu_temperature(c: Call) -> int | None:
    return ABSURD_TEMPERATURE if absurd(c) else c.u64("temperature.gpu")


@device("nvmlDeviceGetTemperature")
def temperature(c: Call, sensor: Any, out: Any) -> int:
    if abi.target(out) is None or abi.number(sensor) != 0:  # NVML_TEMPERATURE_GPU
        return errors.INVALID_ARGUMENT
    value = _gpu_temperature(c)
    return errors.NOT_SUPPORTED if value is None else abi.put(out, value)


@device("nvmlDeviceGetTemperatureV")
def temperature_v(c: Call, out: Any) -> int:
    reading = abi.target(out)
    if reading is None:
        return errors.INVALID_ARGUMENT
    if reading.version != TEMPERATURE_V1:
        return errors.ARGUMENT_VERSION_MISMATCH
    if reading.sensorType != 0:
        return errors.INVALID_ARGUMENT
    value = _gpu_temperature(c)
    if value is None:
        return errors.NOT_SUPPORTED
    reading.temperature = value - 2**32 if value >= 2**31 else value  # an int in the struct
    return errors.SUCCESS


_THRESHOLDS = {0: "temperature.shutdown", 1: "temperature.slowdown", 2: "temperature.mem_max",
               3: "temperature.max_operating"}  # fmt: skip


@device("nvmlDeviceGetTemperatureThreshold")
def threshold(c: Call, kind: Any, out: Any) -> int:
    if abi.target(out) is None:
        return errors.INVALID_ARGUMENT
    key = _THRESHOLDS.get(abi.number(kind))
    return errors.NOT_SUPPORTED if key is None else c.out(out, key)


@device("nvmlDeviceGetFanSpeed")
def fan(c: Call, out: Any) -> int:
    return c.out(out, "fan_speed")


@device("nvmlDeviceGetFanSpeed_v2")
def fan_v2(c: Call, fan_index: Any, out: Any) -> int:
    """The simulated GPU has one fan, present when ``fan_speed`` is."""
    if c.text("fan_speed") is None:
        return errors.NOT_SUPPORTED
    if abi.number(fan_index) != 0:
        return errors.INVALID_ARGUMENT
    return c.out(out, "fan_speed")


@device("nvmlDeviceGetNumFans")
def fans(c: Call, out: Any) -> int:
    if abi.target(out) is None:
        return errors.INVALID_ARGUMENT
    return errors.NOT_SUPPORTED if c.text("fan_speed") is None else abi.put(out, 1)


@device("nvmlDeviceGetPowerUsage")
def power(c: Call, out: Any) -> int:
    return c.out(out, "power.usage")


@device("nvmlDeviceGetPowerManagementLimit")
def power_limit(c: Call, out: Any) -> int:
    return c.out(out, "power.limit")


@device("nvmlDeviceGetPowerManagementDefaultLimit")
def power_default(c: Call, out: Any) -> int:
    return c.out(out, "power.default_limit")


@device("nvmlDeviceGetEnforcedPowerLimit")
def power_enforced(c: Call, out: Any) -> int:
    return c.out(out, "power.enforced_limit")


@device("nvmlDeviceGetPowerManagementLimitConstraints")
def power_constraints(c: Call, low: Any, high: Any) -> int:
    if abi.target(low) is None or abi.target(high) is None:
        return errors.INVALID_ARGUMENT
    lo, hi = c.u64("power.min_limit"), c.u64("power.max_limit")
    if lo is None or hi is None:
        return errors.NOT_SUPPORTED
    abi.put(low, lo)
    return abi.put(high, hi)


@device("nvmlDeviceGetTotalEnergyConsumption")
def energy(c: Call, out: Any) -> int:
    return c.out(out, "energy")


_CLOCKS = {0: "graphics", 1: "sm", 2: "memory", 3: "video"}


def _clock(c: Call, family: str, kind: Any, out: Any) -> int:
    clock = _CLOCKS.get(abi.number(kind))
    if clock is None or abi.target(out) is None:
        return errors.INVALID_ARGUMENT
    return c.out(out, f"{family}.{clock}")


@device("nvmlDeviceGetClockInfo")
def clock_info(c: Call, kind: Any, out: Any) -> int:
    return _clock(c, "clock", kind, out)


@device("nvmlDeviceGetMaxClockInfo")
def max_clock_info(c: Call, kind: Any, out: Any) -> int:
    return _clock(c, "max_clock", kind, out)


@device("nvmlDeviceGetApplicationsClock")
def applications_clock(c: Call, kind: Any, out: Any) -> int:
    return _clock(c, "app_clock", kind, out)


@device("nvmlDeviceGetClock")
def clock(c: Call, kind: Any, clock_id: Any, out: Any) -> int:
    family = {0: "clock", 1: "app_clock", 3: "max_clock"}.get(abi.number(clock_id))  # CURRENT, APP_CLOCK_TARGET, …
    return errors.NOT_SUPPORTED if family is None else _clock(c, family, kind, out)


@device("nvmlDeviceGetPerformanceState")
def pstate(c: Call, out: Any) -> int:
    if abi.target(out) is None:
        return errors.INVALID_ARGUMENT
    value = c.u64("pstate")
    return errors.NOT_SUPPORTED if value is None else abi.put(out, value if value <= 15 else 32)  # 32: UNKNOWN


def _flag(c: Call, key: str, out: Any) -> int:
    if abi.target(out) is None:
        return errors.INVALID_ARGUMENT
    value = c.u64(key)
    return errors.NOT_SUPPORTED if value is None else abi.put(out, 1 if value else 0)


@device("nvmlDeviceGetPersistenceMode")
def persistence(c: Call, out: Any) -> int:
    return _flag(c, "persistence_mode", out)


@device("nvmlDeviceGetComputeMode")
def compute_mode(c: Call, out: Any) -> int:
    return c.out(out, "compute_mode")


@device("nvmlDeviceGetVirtualizationMode")
def virtualization_mode(c: Call, out: Any) -> int:
    """The ``NVML_GPU_VIRTUALIZATION_MODE_*`` number."""
    return c.out(out, "virtualization_mode")


@device("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
def clock_events(c: Call, out: Any) -> int:
    return c.out(out, "clock_event_reasons")


@device("nvmlDeviceGetSupportedClocksEventReasons", "nvmlDeviceGetSupportedClocksThrottleReasons")
def supported_clock_events(c: Call, out: Any) -> int:
    return abi.put(out, CLOCK_EVENT_REASONS_ALL)


_VIOLATIONS = {0: "power", 1: "thermal", 2: "sync_boost", 3: "board_limit", 4: "low_util", 5: "reliability"}


@device("nvmlDeviceGetViolationStatus")
def violation(c: Call, policy: Any, out: Any) -> int:
    record = abi.target(out)
    if record is None:
        return errors.INVALID_ARGUMENT
    key = _VIOLATIONS.get(abi.number(policy))
    ns = None if key is None else c.u64(f"violation.{key}")
    if ns is None:
        return errors.NOT_SUPPORTED
    record.referenceTime = time.time_ns() // 1000
    record.violationTime = ns
    return errors.SUCCESS


@device("nvmlDeviceGetPcieThroughput")
def pcie_throughput(c: Call, counter: Any, out: Any) -> int:
    key = {0: "pcie.tx", 1: "pcie.rx"}.get(abi.number(counter))
    return errors.INVALID_ARGUMENT if key is None else c.out(out, key)


@device("nvmlDeviceGetCurrPcieLinkGeneration")
def pcie_gen(c: Call, out: Any) -> int:
    return c.out(out, "pcie.link_gen")


@device("nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetGpuMaxPcieLinkGeneration")
def pcie_max_gen(c: Call, out: Any) -> int:
    return c.out(out, "pcie.max_link_gen")


@device("nvmlDeviceGetCurrPcieLinkWidth")
def pcie_width(c: Call, out: Any) -> int:
    return c.out(out, "pcie.link_width")


@device("nvmlDeviceGetMaxPcieLinkWidth")
def pcie_max_width(c: Call, out: Any) -> int:
    return c.out(out, "pcie.max_link_width")


@device("nvmlDeviceGetPcieReplayCounter")
def pcie_replay(c: Call, out: Any) -> int:
    return c.out(out, "pcie.replay_counter")


@device("nvmlDeviceGetEccMode")
def ecc_mode(c: Call, current: Any, pending: Any) -> int:
    if abi.target(current) is None or abi.target(pending) is None:
        return errors.INVALID_ARGUMENT
    value = c.u64("ecc.mode")
    if value is None:
        return errors.NOT_SUPPORTED
    after_reboot = c.u64("ecc.pending")  # absent: no change pending
    abi.put(current, 1 if value else 0)
    return abi.put(pending, 1 if (value if after_reboot is None else after_reboot) else 0)


@device("nvmlDeviceGetTotalEccErrors")
def ecc_errors(c: Call, error_type: Any, counter_type: Any, out: Any) -> int:
    counter = {0: "volatile", 1: "aggregate"}.get(abi.number(counter_type))
    kind = {0: "corrected", 1: "uncorrected"}.get(abi.number(error_type))
    if counter is None or kind is None or abi.target(out) is None:
        return errors.INVALID_ARGUMENT
    return c.out(out, f"ecc.{counter}.{kind}")


@device("nvmlDeviceGetRemappedRows")
def remapped_rows(c: Call, corr: Any, unc: Any, pending: Any, failure: Any) -> int:
    if any(abi.target(arg) is None for arg in (corr, unc, pending, failure)):
        return errors.INVALID_ARGUMENT
    correctable, uncorrectable = c.u64("remapped_rows.correctable"), c.u64("remapped_rows.uncorrectable")
    if correctable is None or uncorrectable is None:
        return errors.NOT_SUPPORTED
    abi.put(corr, correctable)
    abi.put(unc, uncorrectable)
    abi.put(pending, c.u64("remapped_rows.pending") or 0)
    return abi.put(failure, c.u64("remapped_rows.failure") or 0)


def _retired(c: Call, cause: Any, count: Any, addresses: Any, stamps: Any) -> int:
    """Two-call pattern; made-up but stable addresses and timestamps."""
    number, addresses, stamps = abi.number(cause), abi.target(addresses), abi.target(stamps)
    key = {0: "retired_pages.single_bit", 1: "retired_pages.double_bit"}.get(number)
    if key is None or abi.target(count) is None:
        return errors.INVALID_ARGUMENT
    pages = c.u64(key)
    if pages is None:
        return errors.NOT_SUPPORTED
    pages &= 0xFFFFFFFF
    if abi.target(count).value < pages:
        abi.put(count, pages)
        return errors.INSUFFICIENT_SIZE
    if pages and addresses is None:
        return errors.INVALID_ARGUMENT
    for i in range(pages):
        addresses[i] = ((number + 1) << 32) | (i << 12)
        if stamps is not None:
            stamps[i] = 1700000000 + i
    return abi.put(count, pages)


@device("nvmlDeviceGetRetiredPages")
def retired_pages(c: Call, cause: Any, count: Any, addresses: Any) -> int:
    return _retired(c, cause, count, addresses, None)


@device("nvmlDeviceGetRetiredPages_v2")
def retired_pages_v2(c: Call, cause: Any, count: Any, addresses: Any, stamps: Any = None) -> int:
    return _retired(c, cause, count, addresses, stamps)


@device("nvmlDeviceGetRetiredPagesPendingStatus")
def retired_pending(c: Call, out: Any) -> int:
    return _flag(c, "retired_pages.pending", out)
