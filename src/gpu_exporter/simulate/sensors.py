"""Per-device entry points for thermals, fans, power, clocks, performance state, modes,
clock-event reasons and violation times: °C, percent, mW, MHz and ns as NVML gives them."""

from __future__ import annotations

import time
from typing import Any

from gpu_exporter.simulate import abi, errors
from gpu_exporter.simulate.call import Call, device
from gpu_exporter.simulate.device import (
    ABSURD_TEMPERATURE,
    CLOCK_EVENT_REASONS_ALL,
    MARGIN_TEMPERATURE_V1,
    TEMPERATURE_V1,
    absurd,
)


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


@device("nvmlDeviceGetMarginTemperature")
def margin(c: Call, out: Any) -> int:
    """``temperature.margin``: °C below the slowdown limit, signed (negative past it)."""
    reading = abi.target(out)
    if reading is None:
        return errors.INVALID_ARGUMENT
    if reading.version != MARGIN_TEMPERATURE_V1:
        return errors.ARGUMENT_VERSION_MISMATCH
    value = c.f64("temperature.margin")
    if value is None:
        return errors.NOT_SUPPORTED
    reading.marginTemperature = int(value)
    return errors.SUCCESS


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
    return c.out_pair(low, "power.min_limit", high, "power.max_limit")


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


@device("nvmlDeviceGetPersistenceMode")
def persistence(c: Call, out: Any) -> int:
    return c.flag(out, "persistence_mode")


@device("nvmlDeviceGetAutoBoostedClocksEnabled")
def auto_boost(c: Call, current: Any, default: Any) -> int:
    """``auto_boost`` (0 or 1) and ``auto_boost.default`` (else the current setting)."""
    if abi.target(current) is None or abi.target(default) is None:
        return errors.INVALID_ARGUMENT
    value = c.u64("auto_boost")
    if value is None:
        return errors.NOT_SUPPORTED
    fallback = c.u64("auto_boost.default")
    abi.put(default, 1 if (value if fallback is None else fallback) else 0)
    return abi.put(current, 1 if value else 0)


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


_VIOLATIONS = {0: "power", 1: "thermal", 2: "sync_boost", 3: "board_limit", 4: "low_util", 5: "reliability",
               10: "app_clocks", 11: "base_clocks"}  # fmt: skip


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
