"""GPM (GPU Performance Monitoring, Hopper and later): SM activity, occupancy, pipe and engine activity
and PCIe/NVLink rates, which NVML computes from two samples of the GPU's own counters.

Per entity (a GPU, or a MIG GPU instance) two sample buffers are allocated once (``nvmlGpmSampleAlloc``)
and freed when the entity goes or the backend closes (``nvmlGpmSampleFree``). Every read takes one sample
(``nvmlGpmSampleGet``, or ``nvmlGpmMigSampleGet`` with the GPU instance id) into the spare buffer and asks
``nvmlGpmMetricsGet`` for the metrics between it and the previous one: each value is the mean over the
interval between the two samples, which is kept too (``interval``, seconds of this process's monotonic
clock). The first read after start, and the first after a failed sample (a gap: another profiler held the
counters, the GPU was lost), yields no values rather than a mean over an unknown interval.

A sample refused because another profiler holds the counters (``IN_USE``: Nsight, DCGM's profiling module)
or because they are restricted to administrators (``NO_PERMISSION``) is not asked again at every read: the
entity backs off (:data:`HELD_RETRY_SECONDS`, doubling up to :data:`HELD_RETRY_MAX_SECONDS`), and until then
each read fails with the same error without calling NVML, so the values stay absent for the same reason.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pynvml

CALL = "nvmlGpmMetricsGet"
#: First wait before a sample refused for held counters (or no permission) is tried again (seconds): a
#: profiling session of a few seconds costs a few seconds of values, a long one is asked about ever less often.
HELD_RETRY_SECONDS = 5.0
#: Longest wait between two tries of a refused sample (the wait doubles after each refusal).
HELD_RETRY_MAX_SECONDS = 600.0
#: NVML answers that mean the counters are not ours to take now: backed off rather than asked every read.
_HELD = frozenset({pynvml.NVML_ERROR_IN_USE, pynvml.NVML_ERROR_NO_PERMISSION})
#: The selector that reads the interval between the two samples (seconds) instead of a metric.
INTERVAL = "interval"
#: Catalogue selector → NVML metric id (nvml.h ``nvmlGpmMetricId_t``). Percent metrics are 0-100; the
#: ``*_per_sec`` ones MiB/s.
METRICS: dict[str, int] = {
    "graphics_util": pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL,
    "sm_util": pynvml.NVML_GPM_METRIC_SM_UTIL,
    "sm_occupancy": pynvml.NVML_GPM_METRIC_SM_OCCUPANCY,
    "integer_util": pynvml.NVML_GPM_METRIC_INTEGER_UTIL,
    "any_tensor_util": pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    "dfma_tensor_util": pynvml.NVML_GPM_METRIC_DFMA_TENSOR_UTIL,
    "hmma_tensor_util": pynvml.NVML_GPM_METRIC_HMMA_TENSOR_UTIL,
    "imma_tensor_util": pynvml.NVML_GPM_METRIC_IMMA_TENSOR_UTIL,
    "dram_bw_util": pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
    "fp64_util": pynvml.NVML_GPM_METRIC_FP64_UTIL,
    "fp32_util": pynvml.NVML_GPM_METRIC_FP32_UTIL,
    "fp16_util": pynvml.NVML_GPM_METRIC_FP16_UTIL,
    "pcie_tx_per_sec": pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC,
    "pcie_rx_per_sec": pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC,
    "nvlink_total_tx_per_sec": pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC,
    "nvlink_total_rx_per_sec": pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC,
    # C2C (the GPU's chip-to-chip link to a Grace CPU): all bytes (headers and payload) and data bytes, MiB/s
    "c2c_total_tx_per_sec": pynvml.NVML_GPM_METRIC_C2C_TOTAL_TX_PER_SEC,
    "c2c_total_rx_per_sec": pynvml.NVML_GPM_METRIC_C2C_TOTAL_RX_PER_SEC,
    "c2c_data_tx_per_sec": pynvml.NVML_GPM_METRIC_C2C_DATA_TX_PER_SEC,
    "c2c_data_rx_per_sec": pynvml.NVML_GPM_METRIC_C2C_DATA_RX_PER_SEC,
    **{f"nvdec_{n}_util": getattr(pynvml, f"NVML_GPM_METRIC_NVDEC_{n}_UTIL") for n in range(8)},
    **{f"nvjpg_{n}_util": getattr(pynvml, f"NVML_GPM_METRIC_NVJPG_{n}_UTIL") for n in range(8)},
    **{f"nvofa_{n}_util": getattr(pynvml, f"NVML_GPM_METRIC_NVOFA_{n}_UTIL") for n in range(2)},
}
#: Per-NVLink selectors of the catalogue (a link row's source) → the metric of link L (links 0-71).
LINK_SELECTORS: tuple[str, ...] = ("nvlink_tx_per_sec", "nvlink_rx_per_sec")
METRICS.update(
    {
        f"nvlink_l{link}_{way}_per_sec": getattr(pynvml, f"NVML_GPM_METRIC_NVLINK_L{link}_{way.upper()}_PER_SEC")
        for link in range(72)
        for way in ("tx", "rx")
    }
)
SELECTORS: tuple[str, ...] = (*METRICS, INTERVAL)


def link_selector(selector: str, link: int) -> str:
    """The selector of a per-link source for NVLink ``link``: ``nvlink_tx_per_sec`` → ``nvlink_l3_tx_per_sec``."""
    return selector.replace("nvlink_", f"nvlink_l{link}_", 1)


Outcome = float | Exception  # a metric's value, or the NVMLError of its entry


@dataclass
class _Buffers:
    """The two sample buffers of one entity and the request struct reused for every read."""

    previous: Any
    spare: Any
    request: Any
    taken_at: float = 0.0
    primed: bool = False  # ``previous`` holds a good sample


@dataclass
class _Held:
    """An entity whose sample was refused (counters held, no permission): the refusal, when to try again
    (monotonic seconds) and the wait after the next refusal."""

    status: int  # the refusal's nvmlReturn_t
    retry_at: float
    delay: float


class GpmSampler:
    """Sample buffers per entity key (a GPU's UUID, or (UUID, GPU instance id)). Reads of different
    entities may run on different threads; one entity is read by one thread at a time."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._buffers: dict[Hashable, _Buffers] = {}
        self._held: dict[Hashable, _Held] = {}
        self._lock = threading.Lock()
        self._clock = clock

    def read(self, key: Hashable, take: Callable[[Any], object], asked: Sequence[str]) -> dict[str, Outcome]:
        """Take one sample with ``take(buffer)``; with a previous one, the ``asked`` selectors' outcomes
        between the two (``{}`` at the first sample). An error of the sample or of the metrics call
        propagates, and the next read starts again from a first sample; while ``key`` backs off after a
        refused sample, the refusal is raised again without a call."""
        held = self._held.get(key)
        if held is not None and self._clock() < held.retry_at:
            raise pynvml.NVMLError(held.status)  # a new one each time: a kept one would grow its traceback
        buffers = self._get(key)
        try:
            take(buffers.spare)
        except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError) as err:
            buffers.primed = False  # a gap: the next good sample is a first one again
            if isinstance(err, pynvml.NVMLError) and err.value in _HELD:
                delay = HELD_RETRY_SECONDS if held is None else min(2 * held.delay, HELD_RETRY_MAX_SECONDS)
                self._held[key] = _Held(err.value, self._clock() + delay, delay)
            raise
        self._held.pop(key, None)
        now = self._clock()
        result: dict[str, Outcome] = {}
        try:
            if buffers.primed:
                result = self._metrics(buffers, asked, now)
        finally:
            buffers.previous, buffers.spare = buffers.spare, buffers.previous
            buffers.taken_at, buffers.primed = now, True
        return result

    @staticmethod
    def _metrics(buffers: _Buffers, asked: Sequence[str], now: float) -> dict[str, Outcome]:
        wanted = [selector for selector in asked if selector in METRICS]
        request = buffers.request
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(wanted)
        request.sample1, request.sample2 = buffers.previous, buffers.spare
        for i, selector in enumerate(wanted):
            request.metrics[i].metricId = METRICS[selector]
        result: dict[str, Outcome] = {}
        if wanted:
            pynvml.nvmlGpmMetricsGet(request)
            for i, selector in enumerate(wanted):
                metric = request.metrics[i]
                status = metric.nvmlReturn
                result[selector] = float(metric.value) if status == pynvml.NVML_SUCCESS else pynvml.NVMLError(status)
        result[INTERVAL] = now - buffers.taken_at
        return result

    def _get(self, key: Hashable) -> _Buffers:
        with self._lock:
            found = self._buffers.get(key)
        if found is not None:
            return found
        first = pynvml.nvmlGpmSampleAlloc()
        try:
            second = pynvml.nvmlGpmSampleAlloc()
        except pynvml.NVMLError:
            pynvml.nvmlGpmSampleFree(first)
            raise
        made = _Buffers(first, second, pynvml.c_nvmlGpmMetricsGet_t())
        with self._lock:
            self._buffers[key] = made
        return made

    def retain(self, keys: Iterable[Hashable]) -> None:
        """Free the buffers of every entity not in ``keys`` (gone from the last enumeration)."""
        keep = set(keys)
        with self._lock:
            gone = [key for key in self._buffers if key not in keep]
            freed = [self._buffers.pop(key) for key in gone]
            self._held = {key: held for key, held in self._held.items() if key in keep}
        for buffers in freed:
            _free(buffers)

    def close(self) -> None:
        """Free every buffer (before ``nvmlShutdown``) and forget every back-off."""
        self.retain(())

    def __len__(self) -> int:
        with self._lock:
            return len(self._buffers)


def _free(buffers: _Buffers) -> None:
    for sample in (buffers.previous, buffers.spare):
        # The library is going away or the buffer was never valid: nothing else to do.
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlGpmSampleFree(sample)
