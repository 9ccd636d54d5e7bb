"""One measurement point: a started system at one host size, measured once, at its own interval.

Order (each step bounded in time): wait until it serves the last GPU → settle a few of its own
intervals (:meth:`Plan.interval`: gpu-exporter and the floor at gpu-exporter's, by default its own
5 s; nvitop-exporter at 1 s) →
warm-up scrapes → RSS "after warm-up" → an idle window with no scrapes (sampling CPU) → the
**headline** window: as Prometheus uses an exporter, one scrape with Prometheus' Accept and
Accept-Encoding headers every ``prometheus_every_s`` (CPU per minute, and each such scrape's
latency) → scrapes with one client up to ``scrapes`` in total (scrape CPU, then RSS "after N
scrapes") → one latency run per concurrency level. The floor (no HTTP) only has the headline
window, without scrapes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from bench import procfs, wrk
from bench.systems import CEILING, NVITOP, PROMETHEUS_HEADERS, Running, Scrape, scrape, wait_floor, wait_ready
from gpu_exporter.backends.nvml import NvmlBackend

#: gpu-exporter's own interval on NVML (started without ``--collect-interval``).
GPU_EXPORTER_DEFAULT_INTERVAL_S: float = NvmlBackend.default_interval


@dataclass(frozen=True)
class Plan:
    """How long and how much: the knobs of one measurement point.

    Each system runs at its own interval: gpu-exporter at ``gpu_exporter_interval_s`` (None: started
    without ``--collect-interval``, at its default :data:`GPU_EXPORTER_DEFAULT_INTERVAL_S`), the floor
    at gpu-exporter's (it mirrors gpu-exporter's calls per interval), nvitop-exporter at
    ``nvitop_interval_s``; :meth:`interval` is the effective one of a system (settle waits, counting).
    The CPU windows (``idle_s``, ``prometheus_s``) are whole multiples of gpu-exporter's interval where
    the defaults allow: 20 s and 30 s at its default 5 s; the run's ``_plan`` rounds the quick run's
    3 s and 6 s up to whole intervals, and leaves windows given on the command line as they are.
    """

    gpu_exporter_interval_s: float | None = None
    nvitop_interval_s: float = 1.0
    ready_timeout_s: float = 60.0
    settle_intervals: int = 3
    warmup_scrapes: int = 50
    idle_s: float = 20.0
    ceiling_idle_s: float = 5.0
    scrapes: int = 10_000
    scrapes_max_s: float = 40.0
    latency_s: float = 5.0
    concurrency: tuple[int, ...] = (1, 16)
    prometheus_s: float = 30.0
    prometheus_every_s: float = 15.0

    def interval(self, system: str) -> float:
        """The effective interval of ``system`` (the ceiling has none: gpu-exporter's)."""
        if system == NVITOP:
            return self.nvitop_interval_s
        return GPU_EXPORTER_DEFAULT_INTERVAL_S if self.gpu_exporter_interval_s is None else self.gpu_exporter_interval_s


def _series(body: bytes) -> int:
    return sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))


def _window(pid: int) -> tuple[float, float, procfs.HostTimes]:
    return procfs.cpu_seconds(pid), time.monotonic(), procfs.host_times()


def measure(
    running: Running, plan: Plan, wrk_path: str, expect: bytes, idle_s: float, headline: bool = True
) -> tuple[dict[str, Any], Scrape]:
    """Measure ``running`` once; returns the figures and the exposition it served after warm-up."""
    pid = running.pid
    url = running.url
    scrapes_done = 0
    started = time.monotonic()
    wait_ready(running, expect, plan.ready_timeout_s)
    ready_s = time.monotonic() - started
    scrapes_done += 1
    # the ceiling samples nothing: a second per settle interval, as before
    time.sleep(plan.settle_intervals * (1.0 if running.system == CEILING else plan.interval(running.system)))
    for _ in range(plan.warmup_scrapes):
        scrape(url)
    scrapes_done += plan.warmup_scrapes
    rss_warm = procfs.rss_bytes(pid)
    exposition = scrape(url)
    scrapes_done += 1

    # Idle: no scrapes at all, only the system's own sampling at its interval.
    user0, sys0 = procfs.cpu_times(pid)
    cpu0, t0, host0 = _window(pid)
    time.sleep(idle_s)
    cpu1, t1, host1 = _window(pid)
    user1, sys1 = procfs.cpu_times(pid)
    idle_cpu, idle_window = cpu1 - cpu0, t1 - t0
    idle_rate = idle_cpu / idle_window
    other_cores = max(0.0, (host1.busy - host0.busy) - idle_cpu) / idle_window

    prometheus = _prometheus_window(running, plan) if headline else {"cpu_s_per_min": None, "scrape_ms": []}
    scrapes_done += len(prometheus["scrape_ms"])

    # Scrapes with one client (as Prometheus scrapes), up to plan.scrapes in total since start.
    target = max(1, plan.scrapes - scrapes_done)
    cpu0, t0, _ = _window(pid)
    capped = wrk.run(wrk_path, url, 1, plan.scrapes_max_s, max_requests=target)
    cpu1, t1, _ = _window(pid)
    scrapes_done += capped.requests
    rss_after = procfs.rss_bytes(pid)
    scrapes_before_rss = scrapes_done
    scrape_run_cpu = cpu1 - cpu0
    scrape_cpu = max(0.0, scrape_run_cpu - idle_rate * (t1 - t0))

    latency: dict[str, Any] = {}
    for connections in plan.concurrency:
        cpu0, t0, _ = _window(pid)
        result = wrk.run(wrk_path, url, connections, plan.latency_s)
        cpu1, t1, _ = _window(pid)
        scrapes_done += result.requests
        net = max(0.0, (cpu1 - cpu0) - idle_rate * (t1 - t0))
        latency[f"c{connections}"] = {
            **result.as_dict(),
            "requests_per_second": result.requests / result.seconds if result.seconds else 0.0,
            "cpu_s_per_1000_scrapes": 1000 * net / result.requests if result.requests else None,
        }
    alive = running.process.poll() is None
    figures: dict[str, Any] = {
        "interval_s": plan.interval(running.system),
        "ready_s": ready_s,
        "exposition_bytes": len(exposition.body),
        "series": _series(exposition.body),
        "content_type": exposition.content_type,
        "rss_warm_bytes": rss_warm,
        "idle_window_s": idle_window,
        "idle_cpu_s": idle_cpu,
        "sampling_cpu_s_per_min": idle_rate * 60,
        "sampling_cpu_user_system_s": [user1 - user0, sys1 - sys0],
        "prometheus": prometheus,
        "prometheus_cpu_s_per_min": prometheus["cpu_s_per_min"],
        "other_load_cores_during_idle": other_cores,
        "scrape_run": {**capped.as_dict(), "cpu_s": scrape_run_cpu},
        "scrape_cpu_s_per_1000": 1000 * scrape_cpu / capped.requests if capped.requests else None,
        "rss_after_scrapes_bytes": rss_after,
        "scrapes_before_rss_after": scrapes_before_rss,
        "latency": latency,
        "rss_end_bytes": procfs.rss_bytes(pid) if alive else None,
        "total_scrapes": scrapes_done,
        "alive_at_end": alive,
    }
    return figures, exposition


def _prometheus_window(running: Running, plan: Plan, scrapes: bool = True) -> dict[str, Any]:
    """CPU over ``plan.prometheus_s`` with one Prometheus-style scrape every ``prometheus_every_s``
    (the first at the window's start), scaled to a minute; each scrape's wall time in ms."""
    pid = running.pid
    cpu0, t0, host0 = _window(pid)
    times: list[float] = []
    due = t0
    while True:
        now = time.monotonic()
        if now >= t0 + plan.prometheus_s:
            break
        if scrapes and now >= due:
            started = time.perf_counter()
            scrape(running.url, headers=PROMETHEUS_HEADERS)
            times.append(1000 * (time.perf_counter() - started))
            due += plan.prometheus_every_s
        time.sleep(max(0.0, min(due if scrapes else t0 + plan.prometheus_s, t0 + plan.prometheus_s) - time.monotonic()))
    cpu1, t1, host1 = _window(pid)
    window = t1 - t0
    return {
        "window_s": window,
        "cpu_s": cpu1 - cpu0,
        "cpu_s_per_min": 60 * (cpu1 - cpu0) / window,
        "scrape_ms": times,
        "scrape_ms_max": max(times) if times else None,
        "other_load_cores": max(0.0, (host1.busy - host0.busy) - (cpu1 - cpu0)) / window,
    }


def measure_floor(running: Running, plan: Plan) -> dict[str, Any]:
    """The floor's figures: CPU per minute over the headline window (it serves no scrape), RSS."""
    started = time.monotonic()
    wait_floor(running, plan.ready_timeout_s)
    ready_s = time.monotonic() - started
    time.sleep(plan.settle_intervals * plan.interval(running.system))
    window = _prometheus_window(running, plan, scrapes=False)
    return {
        "ready_s": ready_s,
        "prometheus": window,
        "prometheus_cpu_s_per_min": window["cpu_s_per_min"],
        "sampling_cpu_s_per_min": window["cpu_s_per_min"],
        "other_load_cores_during_idle": window["other_load_cores"],
        "rss_warm_bytes": procfs.rss_bytes(running.pid),
        "interval_s": plan.interval(running.system),
        "alive_at_end": running.process.poll() is None,
    }
