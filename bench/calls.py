"""Driver calls per GPU per interval, counted with the fake NVML's trace file (``FAKE_NVML_TRACE``:
one line per call, the C symbol then the GPU it was made on), and the floor's plan made from them.

Each system runs once per size with the trace on (a separate process: writing the trace costs CPU,
so the measured runs have it off); after it is ready and two more intervals, the calls of the next
``seconds`` are counted. The Xid listener's waits are left out (they run on their own clock).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.systems import Running

_WAITS = (b"nvmlEventSetWait",)


def _per_gpu(trace: Path) -> Counter[str]:
    """Calls so far by symbol, on GPU handles only (``symbol gpuN`` lines)."""
    if not trace.exists():
        return Counter()
    calls: Counter[str] = Counter()
    for line in trace.read_bytes().splitlines():
        symbol, _, device = line.partition(b" ")
        if device.startswith(b"gpu") and not symbol.startswith(_WAITS):
            calls[symbol.decode()] += 1
    return calls


def count(
    start: Callable[[Path], Running], ready: Callable[[Running], object], trace: Path, gpus: int,
    interval_s: float, seconds: float,
) -> dict[str, Any]:  # fmt: skip
    """Start a system with ``trace``, wait for ``ready``, count ``seconds`` of its calls."""
    trace.unlink(missing_ok=True)
    running = start(trace)
    try:
        ready(running)
        time.sleep(2 * interval_s)
        calls0, t0 = _per_gpu(trace), time.monotonic()
        time.sleep(seconds)
        calls1, t1 = _per_gpu(trace), time.monotonic()
    finally:
        running.stop()
    intervals = (t1 - t0) / interval_s
    calls = calls1 - calls0
    per = intervals * gpus
    return {
        "intervals": intervals,
        "calls_per_gpu_per_interval": calls.total() / per if per else None,
        "by_symbol": {name: n / per for name, n in calls.most_common()},
    }


def floor_plan(counted: dict[str, Any], mig: int, path: Path) -> Path:
    """The floor's plan: gpu-exporter's calls per GPU per interval by symbol, the field ids its
    field-value call asks for every interval (the enabled rows NVML offers as fields), MIG count."""
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
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"rates": counted["by_symbol"], "fields": fields, "mig": mig}, indent=1) + "\n")
    return path
