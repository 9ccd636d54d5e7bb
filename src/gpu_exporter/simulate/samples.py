"""The driver's sample buffers (``nvmlDeviceGetSamples``) and energy counter
(``nvmlDeviceGetTotalEnergyConsumption``), as the C fake answers them (tests/fakenvml/samples.c).

Each sampling type is sampled at its own period into a bounded ring per GPU; a sample stamped T (µs
since the first ``nvmlInit*``) holds the scenario's value at T. Samples are made when a call asks, for
every period boundary since the previous call (at most a ring's worth; the rings are full at the
first call, samples before init holding the values at init), stamped on a driver clock 1000 s ahead
of the scenario's. The energy counter is
``energy`` (mJ before the program started) plus the integral of ``power.usage`` (mW) since init.
"""

from __future__ import annotations

import weakref
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from gpu_exporter.simulate import abi, errors
from gpu_exporter.simulate.call import Call, device
from gpu_exporter.simulate.device import ABSURD_UTILIZATION
from gpu_exporter.simulate.library import Library
from gpu_exporter.simulate.scenario import parse_float

SAMPLING_TYPE_COUNT = 10  # NVML_SAMPLINGTYPE_COUNT
VALUE_TYPE_UNSIGNED_INT = 1  # NVML_VALUE_TYPE_UNSIGNED_INT
#: The driver's clock: µs since init plus 1000 s (the driver was loaded before the program; its rings
#: were full at init, samples before init holding the values at init).
DRIVER_EPOCH_US = 1_000_000_000
_UTILIZATION_PERIOD_US = 150000  # 6-7 a second, 100 kept (15 s)


@dataclass(frozen=True)
class _Type:
    key: str
    name: str  # nvmlSamplingType_t's name, lower case, without NVML_ and _SAMPLES
    period_us: int
    ring: int
    utilization: bool  # not supported on a GPU in MIG mode (nvml.h's note)


#: nvmlSamplingType_t → what the driver samples (module power, NVJPG, NVOFA: not supported).
TYPES: dict[int, _Type] = {
    0: _Type("power.usage", "total_power", 20000, 120, False),
    1: _Type("utilization.gpu", "gpu_utilization", _UTILIZATION_PERIOD_US, 100, True),
    2: _Type("utilization.memory", "memory_utilization", _UTILIZATION_PERIOD_US, 100, True),
    3: _Type("utilization.encoder", "enc_utilization", _UTILIZATION_PERIOD_US, 100, True),
    4: _Type("utilization.decoder", "dec_utilization", _UTILIZATION_PERIOD_US, 100, True),
    5: _Type("clock.sm", "processor_clk", _UTILIZATION_PERIOD_US, 100, False),
    6: _Type("clock.memory", "memory_clk", _UTILIZATION_PERIOD_US, 100, False),
}


@dataclass
class _Ring:
    next_k: int | None = None
    samples: deque[tuple[int, int]] = field(default_factory=deque)


@dataclass
class _State:
    rings: dict[tuple[int, int], _Ring] = field(default_factory=dict)
    energy: dict[int, tuple[int, float]] = field(default_factory=dict)  # gpu → (µs, mJ integrated)


_STATES: weakref.WeakKeyDictionary[Library, _State] = weakref.WeakKeyDictionary()


def _state(lib: Library) -> _State:
    found = _STATES.get(lib)
    if found is None:
        found = _STATES[lib] = _State()
    return found


def _unsupported(c: Call, name: str) -> bool:
    listed = c.text("samples.unsupported")
    return listed is not None and name in {item.strip().lower() for item in listed.replace(" ", ",").split(",")}


def _materialise(c: Call, kind: _Type, ring: _Ring, now_us: int) -> None:
    k_now = now_us // kind.period_us
    key = f"gpu{c.gpu}.{kind.key}"
    value = c.s.get(key)
    absurd = kind.utilization and bool(c.u64("absurd"))
    first = k_now - kind.ring + 1  # a full ring at the first call; older ones were overwritten
    ring.next_k = first if ring.next_k is None else max(ring.next_k, first)
    for k in range(ring.next_k, k_now + 1):
        at = max(k, 0) * kind.period_us / 1e6  # before init: the value at init
        sample = ABSURD_UTILIZATION if absurd else c.lib.uint_value(key, value, at)
        if sample is None:
            continue
        ring.samples.append((DRIVER_EPOCH_US + k * kind.period_us, sample & 0xFFFFFFFF))
        if len(ring.samples) > kind.ring:
            ring.samples.popleft()
    ring.next_k = max(ring.next_k, k_now + 1)


@device("nvmlDeviceGetSamples")
def samples(c: Call, kind_arg: Any, last_seen: Any, value_type: Any, count: Any, out: Any) -> int:
    counter, array = abi.target(count), abi.target(out)
    if counter is None or abi.target(value_type) is None or (array is not None and counter.value == 0):
        return errors.INVALID_ARGUMENT
    number = abi.number(kind_arg)
    if not 0 <= number < SAMPLING_TYPE_COUNT:
        return errors.INVALID_ARGUMENT
    kind = TYPES.get(number)
    if kind is None or c.text(kind.key) is None or _unsupported(c, kind.name):
        return errors.NOT_SUPPORTED
    if kind.utilization and c.u64("mig.mode"):
        return errors.NOT_SUPPORTED
    abi.put(value_type, VALUE_TYPE_UNSIGNED_INT)
    seen = abi.number(last_seen)
    with c.lib.lock:
        ring = _state(c.lib).rings.setdefault((c.gpu, number), _Ring())
        _materialise(c, kind, ring, round(c.t * 1e6))
        newer = [sample for sample in ring.samples if sample[0] > seen]
    if not newer:
        return errors.NOT_FOUND
    if array is None:
        counter.value = len(newer)
        return errors.SUCCESS
    taken = newer[: counter.value]  # the oldest first
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
    body, at, period_text = value.rpartition("@")
    period = parse_float(period_text.strip()) if at and body else None
    total, now = 0.0, start
    while now < end:
        to = end
        if period is not None and period > 0:
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
