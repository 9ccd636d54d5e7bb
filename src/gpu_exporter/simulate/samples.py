"""The driver's sample buffers (``nvmlDeviceGetSamples``) and energy counter
(``nvmlDeviceGetTotalEnergyConsumption``), as the C fake answers them (tests/fakenvml/samples.c, which
says what an H200 on driver 580.159.04 answered).

Each sampling type is sampled at its own period into a bounded ring per GPU, full from the start,
stamped in wall-clock µs. A utilisation sample is the mean of the scenario's value over its period
(truncated; before init, the value at init); a power or clock sample the value at its time. Samples are
made when a call asks, for every period boundary since the previous call (at most a ring's worth). The
energy counter is ``energy`` (mJ before the program started) plus the integral of ``power.usage`` (mW)
since init.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from gpu_exporter.simulate import abi, errors
from gpu_exporter.simulate.call import Call, device
from gpu_exporter.simulate.device import ABSURD_UTILIZATION
from gpu_exporter.simulate.library import PerLibrary
from gpu_exporter.simulate.scenario import parse_float

SAMPLING_TYPE_COUNT = 10  # NVML_SAMPLINGTYPE_COUNT
MODULE_POWER = 7  # NVML_MODULE_POWER_SAMPLES: INVALID_ARGUMENT (measured on H200)
VALUE_TYPE_UNSIGNED_INT = 1  # NVML_VALUE_TYPE_UNSIGNED_INT
EMPTY_CLOCK_COUNT = 100  # the NULL call's answer for an empty clock buffer (measured)


@dataclass(frozen=True)
class _Type:
    key: str
    name: str  # nvmlSamplingType_t's name, lower case, without NVML_ and _SAMPLES
    period_us: int
    ring: int  # samples kept (the NULL call answers one more)
    utilization: bool = False  # a busy percent over the period; not supported in MIG mode (nvml.h)
    clock: bool = False  # kept only with gpuN.samples.clocks = 1


#: nvmlSamplingType_t → what the driver samples (NVJPG, NVOFA: not modelled, NOT_SUPPORTED).
TYPES: dict[int, _Type] = {
    0: _Type("power.usage", "total_power", 20000, 119),
    1: _Type("utilization.gpu", "gpu_utilization", 200000, 71, utilization=True),
    2: _Type("utilization.memory", "memory_utilization", 200000, 71, utilization=True),
    3: _Type("utilization.encoder", "enc_utilization", 200000, 71, utilization=True),
    4: _Type("utilization.decoder", "dec_utilization", 200000, 71, utilization=True),
    5: _Type("clock.sm", "processor_clk", 200000, 71, clock=True),
    6: _Type("clock.memory", "memory_clk", 200000, 71, clock=True),
}


@dataclass
class _Ring:
    next_k: int | None = None
    samples: deque[tuple[int, int]] = field(default_factory=deque)


@dataclass
class _State:
    rings: dict[tuple[int, int], _Ring] = field(default_factory=dict)
    energy: dict[int, tuple[int, float]] = field(default_factory=dict)  # gpu → (µs, mJ integrated)
    epoch_us: int | None = None  # wall-clock µs at init


_state = PerLibrary(_State)


def _unsupported(c: Call, name: str) -> bool:
    listed = c.text("samples.unsupported")
    return listed is not None and name in {item.strip().lower() for item in listed.replace(" ", ",").split(",")}


def _period(value: str) -> float | None:
    body, at, period_text = value.rpartition("@")
    period = parse_float(period_text.strip()) if at and body else None
    return period if period is not None and period > 0 else None


def _mean(c: Call, key: str, value: str, start: float, end: float) -> float | None:
    """The mean of the value over (start, end] seconds, a cycle step by step; None when absent."""
    period = _period(value)
    total, now = 0.0, start
    while now < end:
        to = end
        if period is not None:
            boundary = (int(now / period + 1e-9) + 1) * period
            if now < boundary < end:
                to = boundary
        level = c.lib.float_value(key, value, (now + to) / 2)
        if level is None:
            return None
        total += level * (to - now)
        now = to
    return total / (end - start)


def _materialise(c: Call, kind: _Type, ring: _Ring, now_us: int, epoch_us: int) -> None:
    k_now = now_us // kind.period_us
    key = f"gpu{c.gpu}.{kind.key}"
    value = c.s.get(key)
    absurd = kind.utilization and bool(c.u64("absurd"))
    first = k_now - kind.ring + 1  # a full ring at the first call; older ones were overwritten
    ring.next_k = first if ring.next_k is None else max(ring.next_k, first)
    for k in range(ring.next_k, k_now + 1):
        end = max(k, 0) * kind.period_us / 1e6  # before init: the value at init
        start = max(end - kind.period_us / 1e6, 0.0)
        sample: int | None
        if absurd:
            sample = ABSURD_UTILIZATION
        elif value is None:
            sample = None
        elif kind.utilization and end > start:
            mean = _mean(c, key, value, start, end)
            sample = None if mean is None or mean < 0 else int(mean + 1e-6)  # truncated, past the sum's rounding
        else:
            sample = c.lib.uint_value(key, value, end)
        if sample is None:
            continue
        ring.samples.append((epoch_us + k * kind.period_us, sample & 0xFFFFFFFF))
        if len(ring.samples) > kind.ring:
            ring.samples.popleft()
    ring.next_k = max(ring.next_k, k_now + 1)


@device("nvmlDeviceGetSamples")
def samples(c: Call, kind_arg: Any, last_seen: Any, value_type: Any, count: Any, out: Any) -> int:
    counter, array = abi.target(count), abi.target(out)
    if counter is None or abi.target(value_type) is None or (array is not None and counter.value == 0):
        return errors.INVALID_ARGUMENT
    number = abi.number(kind_arg)
    if not 0 <= number < SAMPLING_TYPE_COUNT or number == MODULE_POWER:
        return errors.INVALID_ARGUMENT
    kind = TYPES.get(number)
    if kind is None or c.text(kind.key) is None or _unsupported(c, kind.name):
        return errors.NOT_SUPPORTED
    if kind.utilization and c.u64("mig.mode"):
        return errors.NOT_SUPPORTED
    abi.put(value_type, VALUE_TYPE_UNSIGNED_INT)
    if kind.clock and not c.u64("samples.clocks"):
        if array is not None:
            return errors.NOT_FOUND  # an empty clock buffer
        counter.value = EMPTY_CLOCK_COUNT
        return errors.SUCCESS
    seen = abi.number(last_seen)
    with c.lib.lock:
        state = _state(c.lib)
        if state.epoch_us is None:
            state.epoch_us = time.time_ns() // 1000 - round(c.t * 1e6)
        ring = state.rings.setdefault((c.gpu, number), _Ring())
        _materialise(c, kind, ring, round(c.t * 1e6), state.epoch_us)
        newer = [sample for sample in ring.samples if sample[0] > seen]
    if array is None:
        counter.value = kind.ring + 1  # whatever lastSeenTimeStamp (measured)
        return errors.SUCCESS
    if not newer:
        return errors.NOT_FOUND
    taken = newer[: counter.value]  # the oldest first (measured)
    for slot, (stamp, value) in zip(array, taken, strict=False):
        slot.timeStamp = stamp
        slot.sampleValue.uiVal = value
    counter.value = len(taken)
    return errors.SUCCESS


def _power_integral(c: Call, start: int, end: int) -> float:
    """The integral of ``power.usage`` (mW) over [start, end] µs, in mJ; a cycle step by step."""
    key = f"gpu{c.gpu}.power.usage"
    value = c.s.get(key)
    if value is None:
        return 0.0
    period = _period(value)
    total, now = 0.0, start
    while now < end:
        to = end
        if period is not None:
            boundary = int((int(now / 1e6 / period) + 1) * period * 1e6 + 0.5)
            if now < boundary < end:
                to = boundary
        level = c.lib.uint_value(key, value, (now + to) / 2e6)
        if level is not None:
            total += level * (to - now) / 1e6
        now = to
    return total


def energy_mj(c: Call) -> int | None:
    """``energy`` plus the integral of ``power.usage`` since init (mJ); None without ``energy``."""
    base = c.u64("energy")
    if base is None:
        return None
    now = round(c.t * 1e6)
    with c.lib.lock:
        state = _state(c.lib)
        since, acc = state.energy.get(c.gpu, (0, 0.0))
        if now > since:
            acc += _power_integral(c, since, now)
            state.energy[c.gpu] = (now, acc)
    return base + int(acc)


@device("nvmlDeviceGetTotalEnergyConsumption")
def energy(c: Call, out: Any) -> int:
    if abi.target(out) is None:
        return errors.INVALID_ARGUMENT
    value = energy_mj(c)
    return errors.NOT_SUPPORTED if value is None else abi.put(out, value)
