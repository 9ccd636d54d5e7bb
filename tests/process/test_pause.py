"""gpu-exporter pause and resume from outside (issue 37): one exporter process on the fake NVML with its
call trace (FAKE_NVML_TRACE) and a control socket in a temporary folder, the pause asked by the real
``gpu-exporter pause`` / ``resume`` commands. A profiling pause stops every GPM call within one interval
and its series go, resume brings them back; a full pause calls nvmlShutdown and then nothing at all while
/metrics answers with gpu_exporter_backend_up 0, and when it ends every GPU is up with its counters
intact; a pause ends on its own."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.harness import SCENARIOS, Exporter, samples, start, value

Parsed = dict[str, dict[frozenset[tuple[str, str]], float]]


def _command(socket: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPU_EXPORTER_", "FAKE_NVML_"))}
    return subprocess.run(
        [sys.executable, "-m", "gpu_exporter", *args, "--control.socket", str(socket)],
        env=env, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip


def _calls(exporter: Exporter) -> list[str]:
    assert exporter.trace_path is not None
    text = exporter.trace_path.read_text() if exporter.trace_path.exists() else ""
    return [line.split()[0] for line in text.splitlines() if line.strip()]


def _until(exporter: Exporter, done: Callable[[Parsed], bool], seconds: float = 20.0) -> Parsed:
    deadline = time.monotonic() + seconds
    while True:
        parsed = samples(exporter.metrics())
        if done(parsed):
            return parsed
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def _cycles(exporter: Exporter, count: int) -> Parsed:
    """The scrape after ``count`` more sampling cycles: each publishes its own wall time, to the nanosecond,
    as gpu_exporter_sample_duration_seconds (two cycles never share one)."""
    parsed = samples(exporter.metrics())
    seen = {value(parsed, "gpu_exporter_sample_duration_seconds")}
    deadline = time.monotonic() + 30
    while len(seen) <= count:
        parsed = samples(exporter.metrics())
        seen.add(value(parsed, "gpu_exporter_sample_duration_seconds"))
        assert time.monotonic() < deadline, "no new cycle"
        time.sleep(0.05)
    return parsed


def test_pause_and_resume_on_the_fakes_call_trace(fakenvml_dir: Path, tmp_path: Path) -> None:
    socket = tmp_path / "ctl" / "control.sock"
    exporter = start(
        fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "--collect-interval", "300ms",
        "--control.socket", str(socket), trace=True,
    )  # fmt: skip
    try:
        before = _until(exporter, lambda p: value(p, "gpu_sm_active_ratio", gpu="0") is not None)
        assert (os.stat(socket).st_mode & 0o777) == 0o600
        # -- profiling only: no GPM call from the next interval on, the profiling series go
        done = _command(socket, "pause", "--profiling-only", "--for", "5m")
        assert done.returncode == 0 and done.stdout.startswith("paused (profiling) until "), done
        paused = _until(exporter, lambda p: value(p, "gpu_sm_active_ratio", gpu="0") is None)
        mark = len(_calls(exporter))
        paused = _cycles(exporter, 3)
        later = _calls(exporter)[mark:]
        assert "nvmlDeviceGetMemoryInfo_v2" in later and not [c for c in later if c.startswith("nvmlGpm")]
        assert value(paused, "gpu_exporter_paused", scope="profiling") == 1
        assert value(paused, "gpu_temperature_celsius", gpu="0") is not None
        assert _command(socket, "resume").returncode == 0
        _until(exporter, lambda p: value(p, "gpu_sm_active_ratio", gpu="0") == 0.35)
        energy = value(samples(exporter.metrics()), "gpu_energy_joules_total", gpu="0")
        assert energy is not None
        # -- full: nvmlShutdown, then no NVML call at all; /metrics answers with the exporter's own series
        done = _command(socket, "pause", "--for", "5m")
        assert done.returncode == 0 and "GPU handles released" in done.stdout, done
        paused = _until(exporter, lambda p: value(p, "gpu_exporter_backend_up") == 0)
        calls = _calls(exporter)
        assert "nvmlShutdown" in calls
        shutdown = len(calls) - calls[::-1].index("nvmlShutdown")
        paused = _cycles(exporter, 5)
        assert _calls(exporter)[shutdown:] == []  # not one call after nvmlShutdown
        assert value(paused, "gpu_up", gpu="0") is None and value(paused, "gpu_exporter_paused", scope="full") == 1
        [info] = paused["gpu_exporter_backend_info"]
        assert dict(info)["reason"] == "paused" and "until" in dict(info)
        status = exporter.get("/api/v1/status").json()
        assert status["paused"]["scope"] == "full" and status["gpus"] == []
        assert "PAUSED on request until" in exporter.get("/").text
        look = subprocess.run(
            [sys.executable, "-m", "gpu_exporter", "snapshot", "--control.socket", str(socket)],
            env={**{k: v for k, v in os.environ.items() if not k.startswith(("GPU_EXPORTER_", "FAKE_NVML_"))},
                 "LD_LIBRARY_PATH": str(fakenvml_dir), "FAKE_NVML_SCENARIO": str(SCENARIOS / "h100x4.scn")},
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert look.returncode == 0 and "the exporter is paused on request until" in look.stdout, look
        assert _command(socket, "resume").stdout.startswith("not paused")
        back = _until(exporter, lambda p: value(p, "gpu_up", gpu="3") == 1 and bool(p.get("gpu_energy_joules_total")))
        assert value(back, "gpu_exporter_backend_up") == 1
        assert (value(back, "gpu_energy_joules_total", gpu="0") or 0) >= energy  # counters intact
        assert _calls(exporter)[shutdown].startswith("nvmlInit")
        # -- a pause ends on its own
        assert _command(socket, "pause", "--for", "1s").returncode == 0
        _until(exporter, lambda p: value(p, "gpu_exporter_paused", scope="full") == 1)
        _until(
            exporter, lambda p: value(p, "gpu_up", gpu="0") == 1 and value(p, "gpu_exporter_paused", scope="full") == 0
        )
    finally:
        exporter.stop()
    assert not socket.exists()
    assert before


def test_pause_says_what_is_wrong(tmp_path: Path) -> None:
    absent = _command(tmp_path / "none.sock", "pause")
    assert absent.returncode == 1 and "no control socket at" in absent.stderr
    too_long = _command(tmp_path / "none.sock", "pause", "--for", "2h")
    assert too_long.returncode == 2 and "--for='2h'" in too_long.stderr and "3600s" in too_long.stderr
