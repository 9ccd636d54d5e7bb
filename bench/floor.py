"""The floor: a bare nvidia-ml-py loop that makes the driver calls gpu-exporter makes, and nothing else.

No HTTP server, no conversion, no exposition: every interval (gpu-exporter's, which the harness
passes: by default its own 5 s) it makes, per GPU, the calls of a plan measured from gpu-exporter's
own trace on the same scenario (``rates``: calls per GPU per gpu-exporter interval by C symbol; a
rate of 0.4 is a call in two intervals of five, as gpu-exporter's every-5th rows), then sleeps to
the next tick. The CPU it uses is what no exporter reading those values with nvidia-ml-py can go
under. Calls that pynvml's wrapper would make twice (the process lists ask for their size first)
are made once with a buffer, as gpu-exporter makes them; ``nvmlDeviceGetSamples`` is made as
gpu-exporter makes it: one direct call per sampling type of the plan's ``sampling_types``, with a
256-entry buffer and the last timestamp seen per (GPU, type), no size query. A symbol's second,
third... call in one interval goes to the next MIG device (memory), the next sampling type or the
next selector (clock type, PCIe counter, ...). It prints ``floor ready`` after the first interval.

    python -m bench.floor --plan PLAN.json --interval 5
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml

Handle = Any
_CLOCKS = (pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_MEM, pynvml.NVML_CLOCK_VIDEO)
_PCIE = (pynvml.NVML_PCIE_UTIL_TX_BYTES, pynvml.NVML_PCIE_UTIL_RX_BYTES)
_ECC = [
    (error, counter)
    for error in (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
    for counter in (pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC)
]
_BUFFER = 16


def _lists(handle: Handle, symbol: str) -> int:
    struct = pynvml.c_nvmlProcessInfo_v3_t if hasattr(pynvml, "c_nvmlProcessInfo_v3_t") else pynvml.c_nvmlProcessInfo_t
    function = pynvml._nvmlGetFunctionPointer(symbol)
    count = ctypes.c_uint(_BUFFER)
    array = (struct * _BUFFER)()
    return int(function(handle, ctypes.byref(count), array))


def _utilization(handle: Handle) -> int:
    function = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetProcessUtilization")
    count = ctypes.c_uint(_BUFFER)
    array = (pynvml.c_nvmlProcessUtilizationSample_t * _BUFFER)()
    return int(function(handle, array, ctypes.byref(count), ctypes.c_ulonglong(0)))


#: Entries of the sample buffer handed to nvmlDeviceGetSamples (gpu-exporter's CAPACITY).
_SAMPLES = 256


class _Samples:
    """``nvmlDeviceGetSamples`` as gpu-exporter calls it: one call, a buffer of :data:`_SAMPLES`
    entries, the last timestamp seen per (GPU, type); the ``n``-th call of an interval reads
    ``types[n]`` (cycling)."""

    def __init__(self, types: list[int]) -> None:
        self.types = types or [pynvml.NVML_GPU_UTILIZATION_SAMPLES]
        self.last: dict[tuple[int, int], int] = {}
        self.function = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetSamples")

    def __call__(self, handle: Handle, n: int) -> int:
        kind = self.types[n % len(self.types)]
        key = (ctypes.cast(handle, ctypes.c_void_p).value or 0, kind)
        buffer = (pynvml.c_nvmlSample_t * _SAMPLES)()
        count, value_type = ctypes.c_uint(_SAMPLES), pynvml._nvmlValueType_t()
        status = int(
            self.function(
                handle, pynvml._nvmlSamplingType_t(kind), ctypes.c_ulonglong(self.last.get(key, 0)),
                ctypes.byref(value_type), ctypes.byref(count), buffer,
            )
        )  # fmt: skip
        if status == pynvml.NVML_SUCCESS and count.value:
            self.last[key] = int(buffer[count.value - 1].timeStamp)
        return status


def _calls(fields: list[tuple[int, int]], types: list[int]) -> dict[str, Callable[[Handle, int], object]]:
    """How to make the ``n``-th call of a symbol in one interval on a handle."""
    return {
        "nvmlDeviceGetSamples": _Samples(types),
        "nvmlDeviceGetFieldValues": lambda h, _n: pynvml.nvmlDeviceGetFieldValues(h, fields),
        "nvmlDeviceGetClockInfo": lambda h, n: pynvml.nvmlDeviceGetClockInfo(h, _CLOCKS[n % 3]),
        "nvmlDeviceGetMaxClockInfo": lambda h, n: pynvml.nvmlDeviceGetMaxClockInfo(h, _CLOCKS[n % 3]),
        "nvmlDeviceGetUtilizationRates": lambda h, _n: pynvml.nvmlDeviceGetUtilizationRates(h),
        "nvmlDeviceGetEncoderUtilization": lambda h, _n: pynvml.nvmlDeviceGetEncoderUtilization(h),
        "nvmlDeviceGetDecoderUtilization": lambda h, _n: pynvml.nvmlDeviceGetDecoderUtilization(h),
        "nvmlDeviceGetMemoryInfo_v2": lambda h, _n: pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2),
        "nvmlDeviceGetMemoryInfo": lambda h, _n: pynvml.nvmlDeviceGetMemoryInfo(h),
        "nvmlDeviceGetBAR1MemoryInfo": lambda h, _n: pynvml.nvmlDeviceGetBAR1MemoryInfo(h),
        "nvmlDeviceGetTemperature": lambda h, _n: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
        "nvmlDeviceGetFanSpeed": lambda h, _n: pynvml.nvmlDeviceGetFanSpeed(h),
        "nvmlDeviceGetPerformanceState": lambda h, _n: pynvml.nvmlDeviceGetPerformanceState(h),
        "nvmlDeviceGetCurrPcieLinkGeneration": lambda h, _n: pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h),
        "nvmlDeviceGetCurrPcieLinkWidth": lambda h, _n: pynvml.nvmlDeviceGetCurrPcieLinkWidth(h),
        "nvmlDeviceGetCurrentClocksEventReasons": lambda h, _n: pynvml.nvmlDeviceGetCurrentClocksEventReasons(h),
        "nvmlDeviceGetComputeRunningProcesses_v3": lambda h, _n: _lists(h, "nvmlDeviceGetComputeRunningProcesses_v3"),
        "nvmlDeviceGetGraphicsRunningProcesses_v3": lambda h, _n: _lists(h, "nvmlDeviceGetGraphicsRunningProcesses_v3"),
        "nvmlDeviceGetProcessUtilization": lambda h, _n: _utilization(h),
        "nvmlDeviceGetPcieThroughput": lambda h, n: pynvml.nvmlDeviceGetPcieThroughput(h, _PCIE[n % 2]),
        "nvmlDeviceGetTotalEccErrors": lambda h, n: pynvml.nvmlDeviceGetTotalEccErrors(h, *_ECC[n % 4]),
        "nvmlDeviceGetViolationStatus": lambda h, n: pynvml.nvmlDeviceGetViolationStatus(h, n % 6),
        "nvmlDeviceGetPowerUsage": lambda h, _n: pynvml.nvmlDeviceGetPowerUsage(h),
    }


def _generic(symbol: str) -> Callable[[Handle, int], object]:
    """A symbol without an entry above: pynvml's wrapper of that name (suffix dropped), handle only."""
    wrapper = getattr(pynvml, symbol.rsplit("_v", 1)[0] if "_v" in symbol else symbol)
    return lambda h, _n: wrapper(h)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__.splitlines()[0])
    parser.add_argument("--plan", type=Path, required=True, help="JSON: rates by symbol, fields, MIG per GPU")
    parser.add_argument("--interval", type=float, default=5.0, help="gpu-exporter's interval, s")
    args = parser.parse_args(argv)
    plan = json.loads(args.plan.read_text())
    rates: dict[str, float] = plan["rates"]
    fields = [(int(fid), int(scope)) for fid, scope in plan["fields"]]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    migs: list[list[Handle]] = []
    for handle in handles:
        found = []
        for index in range(int(plan.get("mig", 0))):
            try:
                found.append(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index))
            except pynvml.NVMLError:
                break
        migs.append(found)
    table = _calls(fields, [int(kind) for kind in plan.get("sampling_types", [])])
    calls = {symbol: table.get(symbol) or _generic(symbol) for symbol in rates}
    cycle = 0
    next_tick = time.monotonic()
    while True:
        for gpu, handle in enumerate(handles):
            for symbol, rate in rates.items():
                call = calls[symbol]
                for n in range(math.floor((cycle + 1) * rate + 1e-9) - math.floor(cycle * rate + 1e-9)):
                    memory = symbol.startswith("nvmlDeviceGetMemoryInfo")
                    target = migs[gpu][n - 1] if memory and 0 < n <= len(migs[gpu]) else handle
                    try:  # noqa: SIM105  (contextlib.suppress costs more per call, and this is the floor)
                        call(target, n)
                    except pynvml.NVMLError:
                        pass
        if cycle == 0:
            print(f"floor ready: {len(handles)} GPUs, {sum(rates.values()):.1f} calls per GPU per interval", flush=True)
        cycle += 1
        next_tick += args.interval
        time.sleep(max(0.0, next_tick - time.monotonic()))


if __name__ == "__main__":
    raise SystemExit(main())
