"""The driver's own sample buffers: ``nvmlDeviceGetSamples``, one call per sampling type per GPU per
read, for the samples taken since the last timestamp seen.

The driver samples GPU, memory, encoder and decoder utilisation and the SM and memory clocks several
times a second into bounded rings (about 100 samples); reading them every read sees every sample a
1 s point read would alias. Each call passes a buffer of :data:`CAPACITY` entries, so the size query
(the call with a NULL buffer) is never needed: the driver fills at most that many, oldest first, and
the rest come with the next read. ``NOT_FOUND`` means no sample is newer (an empty list), except at
the first call (from timestamp 0): a driver's rings are full from the start, so an empty one is a
type it does not keep (an H200 on driver 580 keeps no SM or memory clock samples: the size query
answers 100, a buffer ``NOT_FOUND``). That, ``NOT_SUPPORTED`` or a missing symbol is remembered per
(GPU, type), and that value is read by its point call from then on. Timestamps are the driver's
(wall-clock µs on that driver); only their differences are used.
"""

from __future__ import annotations

from collections.abc import Sequence
from ctypes import byref, c_uint, c_ulonglong

import pynvml

from gpu_exporter.backends.nvml.field_memory import samples as decoded_samples
from gpu_exporter.backends.nvml.readers import Handle

CALL = "nvmlDeviceGetSamples"
#: The most samples one call hands back (a driver's ring holds about 100 of a type).
CAPACITY = 256
#: Catalogue NVML sources (call, selector) the driver also keeps samples of → ``nvmlSamplingType_t``.
BUFFERED: dict[tuple[str, str], int] = {
    ("nvmlDeviceGetUtilizationRates", "gpu"): pynvml.NVML_GPU_UTILIZATION_SAMPLES,
    ("nvmlDeviceGetUtilizationRates", "memory"): pynvml.NVML_MEMORY_UTILIZATION_SAMPLES,
    ("nvmlDeviceGetEncoderUtilization", ""): pynvml.NVML_ENC_UTILIZATION_SAMPLES,
    ("nvmlDeviceGetDecoderUtilization", ""): pynvml.NVML_DEC_UTILIZATION_SAMPLES,
    ("nvmlDeviceGetClockInfo", "sm"): pynvml.NVML_PROCESSOR_CLK_SAMPLES,
    ("nvmlDeviceGetClockInfo", "memory"): pynvml.NVML_MEMORY_CLK_SAMPLES,
}

#: Values computed from the samples of a read (the catalogue's ``nvmlDeviceGetSamples`` selectors):
#: the highest power sample (mW), and the lowest SM clock sample (MHz) among those taken while the latest
#: utilisation sample at or before it was at least :data:`BUSY_PERCENT`.
REDUCED: dict[str, tuple[int, ...]] = {
    "total_power_max": (pynvml.NVML_TOTAL_POWER_SAMPLES,),
    "processor_clk_busy_min": (pynvml.NVML_PROCESSOR_CLK_SAMPLES, pynvml.NVML_GPU_UTILIZATION_SAMPLES),
}
BUSY_PERCENT = 10.0

#: One read's samples of a type: their timestamps (µs, the driver's clock) and raw values, oldest first.
Samples = tuple[Sequence[int], Sequence[float]]
NO_SAMPLES: Samples = ((), ())


def reduce(selector: str, series: tuple[Samples, ...]) -> float | None:
    """One :data:`REDUCED` value from its types' samples of this read (in :data:`REDUCED`'s order);
    None when no sample qualifies."""
    if selector == "total_power_max":
        return max(series[0][1], default=None)
    (clock_stamps, clocks), (util_stamps, utilization) = series
    busy: list[float] = []
    at = 0
    current: float | None = None
    # each clock sample with the latest utilisation sample at or before it
    for t, mhz in zip(clock_stamps, clocks, strict=True):
        while at < len(utilization) and util_stamps[at] <= t:
            current = utilization[at]
            at += 1
        if current is not None and BUSY_PERCENT <= current <= 100:
            busy.append(mhz)
    return min(busy, default=None)


class SampleBuffers:
    """The last timestamp seen (µs, the driver's clock) and the types without a buffer, per GPU."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, int], int] = {}
        self._latest: dict[tuple[str, int], float] = {}  # the newest sample's value
        self._unsupported: set[tuple[str, int]] = set()

    def supported(self, uuid: str, kind: int) -> bool:
        return (uuid, kind) not in self._unsupported

    def unsupported(self, uuid: str, kind: int) -> None:
        """Remember that the driver keeps no buffer of ``kind`` for this GPU."""
        self._unsupported.add((uuid, kind))

    def read(self, uuid: str, handle: Handle, kind: int) -> Samples | None:
        """The timestamps (µs) and raw values of every sample newer than the last seen, oldest first; None when
        the first call finds the buffer empty (the driver keeps none of ``kind``); raises the NVMLError
        of the call (a later NOT_FOUND is an empty list)."""
        key = (uuid, kind)
        last = self._last.get(key, 0)
        buffer = (pynvml.c_nvmlSample_t * CAPACITY)()
        count, value_type = c_uint(CAPACITY), pynvml._nvmlValueType_t()
        fn = pynvml._nvmlGetFunctionPointer(CALL)
        status = fn(
            handle, pynvml._nvmlSamplingType_t(kind), c_ulonglong(last), byref(value_type), byref(count), buffer
        )
        if status == pynvml.NVML_ERROR_NOT_FOUND:
            return None if key not in self._last else NO_SAMPLES
        if status != pynvml.NVML_SUCCESS:
            raise pynvml.NVMLError(status)
        stamps, values = decoded_samples(buffer, count.value, value_type.value)
        if stamps and stamps[-1] >= last:
            self._last[key], self._latest[key] = stamps[-1], float(values[-1])
        else:
            self._last[key] = last
        return stamps, values

    def latest(self, uuid: str, kind: int) -> float | None:
        """The newest sample's raw value seen of ``kind``, if any."""
        return self._latest.get((uuid, kind))

    def forget(self, uuids: set[str]) -> None:
        """Drop the state of GPUs no longer enumerated."""
        self._last = {key: t for key, t in self._last.items() if key[0] in uuids}
        self._latest = {key: v for key, v in self._latest.items() if key[0] in uuids}
        self._unsupported = {key for key in self._unsupported if key[0] in uuids}
