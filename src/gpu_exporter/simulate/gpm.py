"""GPM (GPU Performance Monitoring, Hopper and later), as the C fake answers it (tests/fakenvml/gpm.c):
sample buffers, samples of a GPU (or of a MIG device's GPU instance) and metrics computed from two.

The scenario gives each metric's level, ``gpuN.gpm.<name>`` or ``gpuN.mig.K.gpm.<name>``, in the
metric's unit (percent or MiB/s). Every sample adds the integral of each level since the entity's
previous sample (milli-units × µs, integers) to cumulative counters and copies them with its time;
``nvmlGpmMetricsGet`` divides the difference of two samples' counters by the time between them.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass, field
from typing import Any

from gpu_exporter.simulate import abi, errors
from gpu_exporter.simulate.call import Call, device, raw, system
from gpu_exporter.simulate.library import Library, PerLibrary
from gpu_exporter.simulate.scenario import MAX_MIG, parse_float

METRIC_MAX = 477  # NVML_GPM_METRIC_MAX in nvml.h 13.x
METRICS_GET_VERSION = 1  # NVML_GPM_METRICS_GET_VERSION
_NAMES = {
    1: "graphics_util", 2: "sm_util", 3: "sm_occupancy", 4: "integer_util", 5: "any_tensor_util",
    6: "dfma_tensor_util", 7: "hmma_tensor_util", 8: "dmma_tensor_util", 9: "imma_tensor_util",
    10: "dram_bw_util", 11: "fp64_util", 12: "fp32_util", 13: "fp16_util", 20: "pcie_tx_per_sec",
    21: "pcie_rx_per_sec", 60: "nvlink_total_rx_per_sec", 61: "nvlink_total_tx_per_sec",
    100: "c2c_total_tx_per_sec", 101: "c2c_total_rx_per_sec", 102: "c2c_data_tx_per_sec", 103: "c2c_data_rx_per_sec",
}  # fmt: skip
_NAMES.update({30 + n: f"nvdec_{n}_util" for n in range(8)})
_NAMES.update({40 + n: f"nvjpg_{n}_util" for n in range(8)})
_NAMES.update({50 + n: f"nvofa_{n}_util" for n in range(2)})
_NAMES.update({166 + n: f"nvenc_{n}_util" for n in range(4)})
# Per-link NVLink rates, (rx, tx) pairs: links 0-17 from 62, 18-35 from 212, 36-71 from 405.
for _first, _link0, _count in ((62, 0, 18), (212, 18, 18), (405, 36, 36)):
    for _offset in range(2 * _count):
        _NAMES[_first + _offset] = f"nvlink_l{_link0 + _offset // 2}_{'tx' if _offset % 2 else 'rx'}_per_sec"
#: Metric id → scenario name (what ``gpm.<name>`` the fake models).
NAMES: dict[int, str] = _NAMES


@dataclass
class Sample:
    """One allocated buffer; ``entity`` is (gpu, slot) once filled (slot 0 the GPU, K + 1 MIG device K)."""

    memory: Any
    alive: bool = True
    entity: tuple[int, int] | None = None
    t_us: int = 0
    counters: dict[int, int] = field(default_factory=dict)  # metric id → milli-units × µs
    present: frozenset[int] = frozenset()  # the metrics whose key existed at this sample


@dataclass
class _Counters:
    t_us: int
    acc: dict[int, int] = field(default_factory=dict)


@dataclass
class _State:
    samples: dict[int, Sample] = field(default_factory=dict)
    counters: dict[tuple[int, int], _Counters] = field(default_factory=dict)


_state = PerLibrary(_State)


def _round(x: float) -> int:
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)


def _integral(lib: Library, key: str, value: str, start: int, end: int) -> int:
    """The level's integral over [start, end] µs in milli-units × µs; a cycle step by step."""
    body, at, period_text = value.rpartition("@")
    period = parse_float(period_text.strip()) if at and body else None
    total, now = 0, start
    while now < end:
        to = end
        if period is not None and period > 0:
            boundary = _round((int(now / 1e6 / period) + 1) * period * 1e6)
            if now < boundary < end:
                to = boundary
        level = lib.float_value(key, value, (now + to) / 2e6)
        if level is not None and level > 0:
            total += _round(level * 1000.0) * (to - now)
        now = to
    return total


def _take(c: Call, slot: int, sample: Sample) -> None:
    now = _round(c.t * 1e6)
    prefix = f"gpu{c.gpu}." if slot == 0 else f"gpu{c.gpu}.mig.{slot - 1}."
    with c.lib.lock:
        counters = _state(c.lib).counters.setdefault((c.gpu, slot), _Counters(now))
        since = min(counters.t_us, now)
        present = set()
        for metric, name in NAMES.items():
            key = f"{prefix}gpm.{name}"
            value = c.s.get(key)
            if value is None:
                continue
            counters.acc[metric] = counters.acc.get(metric, 0) + _integral(c.lib, key, value, since, now)
            present.add(metric)
        counters.t_us = max(counters.t_us, now)
        sample.entity, sample.t_us = (c.gpu, slot), now
        sample.counters, sample.present = dict(counters.acc), frozenset(present)


def _sample(lib: Library, pointer: Any) -> Sample | None:
    found = _state(lib).samples.get(abi.address(pointer) or 0)
    return found if found is not None and found.alive else None


@system("nvmlGpmSampleAlloc")
def sample_alloc(c: Call, out: Any) -> int:
    if out is None or abi.target(out) is None:
        return errors.INVALID_ARGUMENT
    memory = ctypes.create_string_buffer(1)
    address = ctypes.addressof(memory)
    with c.lib.lock:
        _state(c.lib).samples[address] = Sample(memory)
    abi.put_pointer(out, address)
    return errors.SUCCESS


@raw("nvmlGpmSampleFree")
def sample_free(lib: Library, symbol: str, pointer: Any) -> int:
    """Freed buffers are only marked dead, so a double free is INVALID_ARGUMENT (as the C fake)."""
    lib.trace(symbol, -1)
    with lib.lock:
        found = _sample(lib, pointer)
        if found is None:
            return errors.INVALID_ARGUMENT
        found.alive = False
    return errors.SUCCESS


def _supported(c: Call) -> bool:
    return bool(c.u64("gpm_supported"))


@device("nvmlGpmSampleGet", mig_ok=True)
def sample_get(c: Call, pointer: Any) -> int:
    """A GPU's sample, or with a MIG handle its GPU instance's; ``gpuN.gpm_supported`` must be 1."""
    sample = _sample(c.lib, pointer)
    if sample is None:
        return errors.INVALID_ARGUMENT
    if not _supported(c):
        return errors.NOT_SUPPORTED
    _take(c, c.mig + 1, sample)
    return errors.SUCCESS


@device("nvmlGpmMigSampleGet")
def mig_sample_get(c: Call, instance: Any, pointer: Any) -> int:
    """GPU instance ``instance`` of a GPU in MIG mode: MIG device K with that ``mig.K.gpu_instance_id``."""
    sample = _sample(c.lib, pointer)
    if sample is None:
        return errors.INVALID_ARGUMENT
    if not _supported(c) or not c.u64("mig.mode"):
        return errors.NOT_SUPPORTED
    wanted = abi.number(instance)
    keys = c.s.gpus.get(c.gpu)
    for k in sorted(keys.mig if keys is not None else ()):
        if k < MAX_MIG and c.u64(f"mig.{k}.gpu_instance_id") == wanted:
            _take(c, k + 1, sample)
            return errors.SUCCESS
    return errors.NOT_FOUND


@system("nvmlGpmMetricsGet")
def metrics_get(c: Call, out: Any) -> int:
    """Each metric: the counters' difference over the time between the two samples (same entity,
    sample2 later); an id not modelled or without its key at sample2 gets NOT_SUPPORTED of its own."""
    request = abi.target(out)
    if request is None:
        return errors.INVALID_ARGUMENT
    if request.version != METRICS_GET_VERSION:
        return errors.ARGUMENT_VERSION_MISMATCH
    if request.numMetrics > METRIC_MAX:
        return errors.INVALID_ARGUMENT
    one, two = _sample(c.lib, request.sample1), _sample(c.lib, request.sample2)
    if one is None or two is None or one.entity is None or one.entity != two.entity or two.t_us <= one.t_us:
        return errors.INVALID_ARGUMENT
    span = two.t_us - one.t_us
    for i in range(request.numMetrics):
        metric = request.metrics[i]
        metric.value = 0.0
        if metric.metricId not in two.present:
            metric.nvmlReturn = errors.NOT_SUPPORTED
            continue
        delta = max(two.counters[metric.metricId] - one.counters.get(metric.metricId, 0), 0)
        metric.value = (delta // span) / 1000.0 if delta % span == 0 else delta / span / 1000.0
        metric.nvmlReturn = errors.SUCCESS
    return errors.SUCCESS
