"""Where gpu-exporter's time goes: py-spy samples of its process while it only samples GPUs (idle)
and while one client scrapes it, plus NVML calls counted with the fake's trace file.

py-spy (from PyPI, in its own venv under the cache) samples the running process from outside
(``--nonblocking``: it is not paused), so the exporter runs unmodified.

Only the thread holding the GIL is sampled (``--gil``), so the samples add up to Python CPU time
however many reader threads wait; C code that releases the GIL (the NVML calls themselves, zlib,
the socket send) is not in them, which is why /proc's CPU figure is given beside them. (Sampling
all threads instead counts threads that wait for the GIL as busy in whatever frame they stopped,
and an event loop waiting for the GIL looks like one idle in ``select``: both mislead.)

Stacks whose innermost frame is a wait are dropped; the rest go into the categories below (the
first category matching any frame of a stack wins).
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import procfs, wrk
from bench.scenarios import Size
from bench.systems import start_gpu_exporter, start_nvitop, wait_ready

#: (category, substring of a frame); more specific first.
CATEGORIES: tuple[tuple[str, str], ...] = (
    ("sampling: NVML reads (backend, pynvml, ctypes)", "NvmlBackend.read "),
    ("sampling: OpenMetrics encoding (prometheus_client)", "prometheus_client/openmetrics/exposition.py"),
    ("sampling: text-format encoding (prometheus_client)", "prometheus_client/exposition.py"),
    ("sampling: gzip of both formats", "(gzip.py:"),
    ("sampling: building metric families", "_families (gpu_exporter/"),
    ("sampling: rest of the cycle (views, snapshot, waits)", "Sampler._loop "),
    ("sampling: per-GPU worker threads (outside reads)", "DeviceWorker._run "),
    ("events: Xid listener", "XidListener._run "),
    ("scrape: gpu-exporter handler (choose the bytes)", "metrics (gpu_exporter/app.py"),
    ("scrape: uvicorn send (h11 framing, socket write)", "RequestResponseCycle.send "),
    ("scrape: starlette app (routing, request, response)", "Starlette.__call__ "),
    ("scrape: uvicorn h11 protocol (parse request)", "H11Protocol."),
    ("event loop and transports", "BaseEventLoop."),
)
_WAITS = (
    "Condition.wait ", "Event.wait ", "EpollSelector.select ", "select ", "sleep ", "Queue.get ",
    "nvmlEventSetWait", "_wait_for_tstate_lock ", "lock.acquire",
)  # fmt: skip


@dataclass(frozen=True)
class Stacks:
    """Parsed ``py-spy record --format raw`` output: stacks (root first) and their sample counts."""

    counts: dict[tuple[str, ...], int]

    @classmethod
    def read(cls, path: Path) -> Stacks:
        counts: Counter[tuple[str, ...]] = Counter()
        for line in path.read_text(errors="replace").splitlines():
            stack, _, count = line.rpartition(" ")
            if stack and count.isdigit():
                counts[tuple(stack.split(";"))] += int(count)
        return cls(dict(counts))

    def busy(self, only: str = "") -> dict[tuple[str, ...], int]:
        """Stacks not ending in a wait (and, with ``only``, having a frame containing it)."""
        return {
            stack: n
            for stack, n in self.counts.items()
            if not stack[-1].startswith(_WAITS) and (not only or any(only in frame for frame in stack))
        }


def _strip_line(frame: str) -> str:
    """``func (path/file.py:123)`` → ``func (path/file.py)``."""
    name, sep, where = frame.partition(" (")
    return name + sep + where.rsplit(":", 1)[0] + ")" if sep else frame


def summarize(stacks: Stacks, rate_hz: int, per: float, top: int = 12, only: str = "") -> dict[str, Any]:
    """Busy milliseconds per unit (``per`` = intervals or scrapes in the window), by category and
    by innermost function; with ``only``, just the stacks having a frame that contains it."""
    busy = stacks.busy(only)
    by_category: Counter[str] = Counter()
    by_leaf: Counter[str] = Counter()
    for stack, n in busy.items():
        joined = ";".join(stack) + ";"
        category = next((name for name, needle in CATEGORIES if needle in joined), "other")
        by_category[category] += n
        by_leaf[_strip_line(stack[-1])] += n
    ms = 1000.0 / rate_hz / per if per else 0.0
    return {
        "samples_busy": sum(busy.values()),
        "samples_all": sum(stacks.counts.values()),
        "ms_per_unit_total": sum(busy.values()) * ms,
        "categories_ms": {name: n * ms for name, n in by_category.most_common()},
        "top_functions_ms": {name: n * ms for name, n in by_leaf.most_common(top)},
    }


def _nvml_calls(trace: Path) -> Counter[str]:
    """Calls recorded so far by symbol, leaving out the Xid listener's waits (own clock)."""
    if not trace.exists():
        return Counter()
    calls = Counter(line.split(b" ", 1)[0].decode() for line in trace.read_bytes().splitlines() if line)
    calls.pop("nvmlEventSetWait_v2", None)
    calls.pop("nvmlEventSetWait", None)
    return calls


def _record(py_spy: Path, pid: int, seconds: int, rate_hz: int, out: Path) -> subprocess.Popen[bytes]:
    command = [
        str(py_spy), "record", "--pid", str(pid), "--duration", str(seconds), "--rate", str(rate_hz),
        "--format", "raw", "--output", str(out), "--nonblocking", "--gil",
    ]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _finish(spy: subprocess.Popen[bytes], seconds: int) -> None:
    try:
        _, err = spy.communicate(timeout=seconds + 30)
    finally:
        if spy.poll() is None:
            spy.kill()
            spy.wait(5)
    if spy.returncode != 0:
        raise RuntimeError(f"py-spy failed ({spy.returncode}): {err.decode(errors='replace').strip()[-1000:]}")


def profile(
    size: Size,
    expect: bytes,
    fake_dir: Path,
    scenario: Path,
    interval_s: float,
    py_spy: Path,
    wrk_path: str,
    workdir: Path,
    idle_s: int,
    scrape_s: int,
    rate_hz: int = 250,
    collect_interval_s: float | None = None,
) -> dict[str, Any]:
    """Profile gpu-exporter at ``size``: idle window, then a window with one client scraping.
    ``interval_s`` is its effective interval; ``collect_interval_s`` what ``--collect-interval`` is
    given (None: not given, gpu-exporter's default, which ``interval_s`` must then be)."""
    trace = workdir / f"nvml-trace-{size.key}.txt"
    trace.unlink(missing_ok=True)
    running = start_gpu_exporter(fake_dir, scenario, collect_interval_s, workdir, trace=trace)
    try:
        wait_ready(running, expect, 60.0)
        time.sleep(2 * interval_s)
        pid = running.pid
        # Idle: only sampling.
        idle_raw = workdir / f"py-spy-idle-{size.key}.txt"
        calls0, cpu0, t0 = _nvml_calls(trace), procfs.cpu_seconds(pid), time.monotonic()
        _finish(_record(py_spy, pid, idle_s, rate_hz, idle_raw), idle_s)
        calls1, cpu1, t1 = _nvml_calls(trace), procfs.cpu_seconds(pid), time.monotonic()
        intervals = (t1 - t0) / interval_s
        idle_calls = calls1 - calls0
        calls_rate = idle_calls.total() / (t1 - t0)
        # Scraping: one client, as Prometheus, for most of the recording.
        scrape_raw = workdir / f"py-spy-scrape-{size.key}.txt"
        spy = _record(py_spy, pid, scrape_s, rate_hz, scrape_raw)
        try:
            time.sleep(1.0)  # let py-spy attach
            calls2, cpu2, t2 = _nvml_calls(trace), procfs.cpu_seconds(pid), time.monotonic()
            load = wrk.run(wrk_path, running.url, 1, max(1, scrape_s - 2))
            calls3, cpu3, t3 = _nvml_calls(trace), procfs.cpu_seconds(pid), time.monotonic()
        finally:
            _finish(spy, scrape_s)
    finally:
        running.stop()
    requests = max(1, load.requests)
    scrape_calls = (calls3 - calls2).total() - calls_rate * (t3 - t2)
    return {
        "size": size.key,
        "rate_hz": rate_hz,
        "interval_s": interval_s,
        "idle": {
            "window_s": t1 - t0,
            "intervals": intervals,
            "nvml_calls_per_interval": idle_calls.total() / intervals,
            "nvml_calls_per_minute": 60 * idle_calls.total() / (t1 - t0),
            "nvml_calls_per_interval_by_symbol": {name: n / intervals for name, n in idle_calls.most_common()},
            "cpu_ms_per_interval_procfs": 1000 * (cpu1 - cpu0) / intervals,
            **summarize(Stacks.read(idle_raw), rate_hz, intervals),
        },
        "scrape": {
            "window_s": t3 - t2,
            "requests": load.requests,
            "p50_ms": load.p50_ms,
            "nvml_calls_per_scrape": scrape_calls / requests,
            "cpu_ms_per_scrape_procfs": 1000 * (cpu3 - cpu2) / requests,
            # Per scrape: everything in the window (it spans ~1 s of idle before and after the load),
            # so the sampling categories show the background cost shared out over the scrapes.
            **summarize(Stacks.read(scrape_raw), rate_hz, requests),
        },
    }


def nvitop_calls(
    size: Size,
    expect: bytes,
    venv: Path,
    fake_dir: Path,
    scenario: Path,
    interval_s: float,
    workdir: Path,
    seconds: int,
) -> dict[str, Any]:
    """NVML calls per interval (its ``interval_s``) and per minute that nvitop-exporter makes at
    ``size`` (no scrapes, no profiler)."""
    trace = workdir / f"nvml-trace-nvitop-{size.key}.txt"
    trace.unlink(missing_ok=True)
    running = start_nvitop(venv, fake_dir, scenario, interval_s, workdir, trace=trace)
    try:
        wait_ready(running, expect, 60.0)
        time.sleep(2 * interval_s)
        calls0, t0 = _nvml_calls(trace), time.monotonic()
        time.sleep(seconds)
        calls1, t1 = _nvml_calls(trace), time.monotonic()
    finally:
        running.stop()
    intervals = (t1 - t0) / interval_s
    calls = calls1 - calls0
    return {
        "interval_s": interval_s,
        "nvml_calls_per_minute": 60 * calls.total() / (t1 - t0),
        "nvml_calls_per_interval": calls.total() / intervals,
        "nvml_calls_per_interval_by_symbol": {name: n / intervals for name, n in calls.most_common()},
    }
