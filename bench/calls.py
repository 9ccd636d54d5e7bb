"""Driver calls and driver samples per GPU per minute (and per interval of the system counted),
counted with the fake NVML's trace file (``FAKE_NVML_TRACE``: one line per call, the C symbol then
the GPU it was made on; an ``nvmlDeviceGetSamples`` line goes on with ``type=T n=N last=TS``, the
sampling type, the samples it handed out and the newest one's timestamp), and the floor's plan made
from gpu-exporter's counts.

Each system runs once per size with the trace on (a separate process: writing the trace costs CPU,
so the measured runs have it off), at its own interval; after it is ready and two more of its
intervals, the calls of the next ``seconds`` (rounded up to whole intervals) are counted. The Xid
listener's waits are left out (they run on their own clock).

Utilisation samples: what a system *sees* of the driver's GPU utilisation samples per GPU per minute
is the samples ``nvmlDeviceGetSamples`` handed out of ``NVML_GPU_UTILIZATION_SAMPLES`` per minute of the
driver time they cover (from the newest sample before the window to the newest at its end, from the
trace's ``last=`` timestamps: a window of two 5 s reads would otherwise read 2 % low or 50 % high as
its edges fall between reads), plus one per ``nvmlDeviceGetUtilizationRates`` call per minute of the
window (a point read sees one sample: the latest, so two point reads inside one driver period see the
same sample and a point read a second sees one of five at 200 ms).
The driver's own count is 60 s ÷ the fake's GPU utilisation period, read from the fake's table of
sampling types (tests/fakenvml/samples.c, documented in src/gpu_exporter/simulate/SCENARIO.md); in
MIG mode the driver keeps no utilisation samples (nvml.h; the fake answers NOT_SUPPORTED): none.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml

from bench.systems import REPO, Running

SAMPLES_CALL = "nvmlDeviceGetSamples"
POINT_UTILIZATION_CALL = "nvmlDeviceGetUtilizationRates"
GPU_UTILIZATION_TYPE: int = pynvml.NVML_GPU_UTILIZATION_SAMPLES
FAKE_SAMPLES_C = REPO / "tests" / "fakenvml" / "samples.c"


def utilization_period_s(source: Path = FAKE_SAMPLES_C) -> float:
    """The fake driver's GPU utilisation sampling period, s: its row in samples.c's ``k_types`` table
    (``[NVML_GPU_UTILIZATION_SAMPLES] = {"utilization.gpu", "gpu_utilization", PERIOD_US, KEPT, …}``)."""
    found = re.search(
        r"\[NVML_GPU_UTILIZATION_SAMPLES\]\s*=\s*\{\s*\"[^\"]*\",\s*\"[^\"]*\",\s*(\d+)\s*,", source.read_text()
    )
    if found is None:
        raise RuntimeError(f"no NVML_GPU_UTILIZATION_SAMPLES row with a period in {source}")
    return int(found.group(1)) / 1e6


def driver_utilization_per_minute(mig: int) -> float:
    """GPU utilisation samples the (fake) driver takes per GPU per minute; none in MIG mode."""
    return 0.0 if mig else 60.0 / utilization_period_s()


class Trace:
    """Calls so far by symbol, calls and samples handed out of ``nvmlDeviceGetSamples`` by sampling
    type, on GPU handles only (``symbol gpuN ...`` lines); per (GPU, type) the samples handed out and
    the newest one's timestamp (µs, the driver's clock)."""

    def __init__(self, path: Path | None = None) -> None:
        self.calls: Counter[str] = Counter()
        self.sample_calls: Counter[int] = Counter()
        self.samples: Counter[int] = Counter()
        self.gpu_samples: Counter[tuple[str, int]] = Counter()
        self.newest: dict[tuple[str, int], int] = {}
        if path is None or not path.exists():
            return
        for line in path.read_bytes().splitlines():
            parts = line.decode(errors="replace").split(" ")
            if len(parts) < 2 or not parts[1].startswith("gpu") or parts[0].startswith("nvmlEventSetWait"):
                continue
            self.calls[parts[0]] += 1
            if parts[0] != SAMPLES_CALL:
                continue
            extra = dict(part.partition("=")[::2] for part in parts[2:])
            if "type" not in extra:
                continue
            kind, n, newest = int(extra["type"]), int(extra.get("n", "0")), int(extra.get("last", "0"))
            self.sample_calls[kind] += 1
            self.samples[kind] += n
            self.gpu_samples[parts[1], kind] += n
            if newest:
                self.newest[parts[1], kind] = newest

    def since(self, before: Trace) -> Trace:
        """The calls and samples after ``before`` (an earlier read of the same file)."""
        out = Trace()
        out.calls = self.calls - before.calls
        out.sample_calls = self.sample_calls - before.sample_calls
        out.samples = self.samples - before.samples
        out.gpu_samples = self.gpu_samples - before.gpu_samples
        out.newest = self.newest
        return out


def _buffer_rate(before: Trace, after: Trace, kind: int) -> float | None:
    """Samples of ``kind`` handed out per minute of driver time, per GPU: for each GPU, the samples
    its reads in the window handed out over the span from the newest sample before the window to the
    newest at its end (so the window's edges, which cut between reads, do not count); None when no GPU
    was read from that buffer both before and in the window."""
    samples = span_us = 0
    for key, newest in after.newest.items():
        if key[1] == kind and key in before.newest and newest > before.newest[key]:
            samples += after.gpu_samples[key] - before.gpu_samples[key]
            span_us += newest - before.newest[key]
    return 60e6 * samples / span_us if span_us else None


def count(
    start: Callable[[Path], Running], ready: Callable[[Running], object], trace: Path, gpus: int,
    interval_s: float, seconds: float, mig: int = 0,
) -> dict[str, Any]:  # fmt: skip
    """Start a system with ``trace``, wait for ``ready``, count ``seconds`` (whole intervals) of its calls."""
    seconds = math.ceil(seconds / interval_s - 1e-9) * interval_s
    trace.unlink(missing_ok=True)
    running = start(trace)
    try:
        ready(running)
        time.sleep(2 * interval_s)
        before, t0 = Trace(trace), time.monotonic()
        time.sleep(seconds)
        after, t1 = Trace(trace), time.monotonic()
    finally:
        running.stop()
    window = t1 - t0
    intervals = window / interval_s
    got = after.since(before)
    per = intervals * gpus
    per_minute = 60 / (window * gpus) if window and gpus else 0.0
    util_buffer = _buffer_rate(before, after, GPU_UTILIZATION_TYPE)
    util_point = got.calls[POINT_UTILIZATION_CALL] * per_minute
    return {
        "interval_s": interval_s,
        "window_s": window,
        "intervals": intervals,
        "calls_per_gpu_per_interval": got.calls.total() / per if per else None,
        "calls_per_gpu_per_minute": got.calls.total() * per_minute,
        "by_symbol": {name: n / per for name, n in got.calls.most_common()},
        "samples_calls_per_gpu_per_interval_by_type": {str(k): n / per for k, n in sorted(got.sample_calls.items())},
        # per minute of wall time (the window), and per minute of the driver time the reads covered
        "samples_per_gpu_per_minute_by_type": {str(k): n * per_minute for k, n in sorted(got.samples.items())},
        "samples_per_gpu_per_driver_minute_by_type": {
            str(k): _buffer_rate(before, after, k) for k in sorted(got.samples)
        },
        "utilization_samples_seen_per_gpu_per_minute": (util_buffer or 0.0) + util_point,
        "utilization_from_buffer_per_gpu_per_minute": util_buffer,
        "utilization_point_reads_per_gpu_per_minute": util_point,
        "driver_utilization_samples_per_gpu_per_minute": driver_utilization_per_minute(mig),
    }


def floor_plan(counted: dict[str, Any], mig: int, path: Path) -> Path:
    """The floor's plan: gpu-exporter's calls per GPU per interval (of gpu-exporter) by symbol, the
    field ids its field-value call asks for every interval (the enabled rows NVML offers as fields),
    the sampling types it reads with ``nvmlDeviceGetSamples`` every interval (those asked at least every
    other interval: a type asked once and found empty or unsupported is not), MIG count."""
    from gpu_exporter.backends.nvml.fields import field_of
    from gpu_exporter.catalogue import DEFAULT_COLLECTORS, enabled_specs

    fields = sorted(
        {
            field
            for spec in enabled_specs(DEFAULT_COLLECTORS)
            if spec.root == "gpu" and spec.every == 1 and not spec.per_link and spec.nvml is not None
            for field in [field_of(spec.nvml, None)]
            if field is not None
        }
    )
    types = sorted(
        int(k) for k, rate in counted.get("samples_calls_per_gpu_per_interval_by_type", {}).items() if rate >= 0.5
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    plan = {"rates": counted["by_symbol"], "fields": fields, "sampling_types": types, "mig": mig}
    path.write_text(json.dumps(plan, indent=1) + "\n")
    return path
