"""Drive Debian's ``wrk`` against one URL on loopback and read back its latency distribution."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parent / "wrk_report.lua"
_MARK = "BENCH_JSON "


class WrkMissing(RuntimeError):
    """``wrk`` is not installed; the message says how to install it."""


def find_wrk() -> str:
    """The path of ``wrk``, or WrkMissing with the install command."""
    path = shutil.which("wrk")
    if path is None:
        raise WrkMissing("wrk (the HTTP load tool) is not installed: apt-get install wrk (Debian/Ubuntu), then rerun")
    return path


def version(wrk: str) -> str:
    """First line of ``wrk --version`` (it prints its usage too, and exits 1)."""
    out = subprocess.run([wrk, "--version"], capture_output=True, text=True, timeout=10, check=False)
    return (out.stdout or out.stderr).splitlines()[0].strip()


@dataclass(frozen=True)
class WrkResult:
    """One wrk run: completed requests, wall seconds, and latency percentiles in milliseconds."""

    connections: int
    requests: int
    seconds: float
    bytes: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float
    errors: dict[str, int]

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def run(
    wrk: str, url: str, connections: int, seconds: float, max_requests: int = 0, timeout_s: float = 10.0
) -> WrkResult:
    """Run ``wrk -t1 -cN -dS`` against ``url``; with ``max_requests`` stop once that many were issued
    (or at ``seconds``, whichever comes first). One wrk thread drives all connections, so the load
    tool takes at most one of the machine's cores."""
    duration = max(1, round(seconds))
    with tempfile.TemporaryDirectory(prefix="bench-wrk-") as tmp:
        marker = Path(tmp) / "cap-reached"
        env = dict(os.environ)
        env.pop("BENCH_MAX_REQUESTS", None)
        env.pop("BENCH_MARKER", None)
        if max_requests > 0:
            env["BENCH_MAX_REQUESTS"] = str(max_requests)
            env["BENCH_MARKER"] = str(marker)
        command = [
            wrk, "-t1", f"-c{connections}", f"-d{duration}s", f"--timeout={timeout_s:g}s", "-s", str(SCRIPT), url,
        ]  # fmt: skip
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            deadline = time.monotonic() + duration + 30.0
            while process.poll() is None and time.monotonic() < deadline:
                if max_requests > 0 and marker.exists():
                    process.send_signal(signal.SIGINT)  # wrk prints its summary and exits
                    break
                time.sleep(0.02)
            stdout, stderr = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(5)
    for line in stdout.splitlines():
        if line.startswith(_MARK):
            data = json.loads(line[len(_MARK) :])
            return WrkResult(
                connections=connections,
                requests=int(data["requests"]),
                seconds=data["duration_us"] / 1e6,
                bytes=int(data["bytes"]),
                p50_ms=data["p50_us"] / 1000,
                p90_ms=data["p90_us"] / 1000,
                p99_ms=data["p99_us"] / 1000,
                max_ms=data["max_us"] / 1000,
                mean_ms=data["mean_us"] / 1000,
                errors={key: int(value) for key, value in data["errors"].items()},
            )
    raise RuntimeError(f"wrk gave no result (exit {process.returncode}): {stderr.strip() or stdout.strip()}")
