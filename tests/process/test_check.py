"""``gpu-exporter check`` against a running exporter on the fake NVML, as Node Problem Detector runs a
custom plugin: exit 1 naming a GPU missing from ``--expected-gpus``, 0 once it is listed, 1 naming a GPU
whose driver asks for a reset, 0 once it no longer does, 1 naming a GPU lost at run time, 2 with the
exporter stopped; every answer one line of at most 80 characters."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.harness import start

GPU = """\
gpu{i}.name = NVIDIA H100 80GB HBM3
gpu{i}.uuid = GPU-00000000-0000-0000-0000-00000000000{i}
gpu{i}.pci_bus_id = 00000000:1{i}:00.0
gpu{i}.temperature.gpu = 40
gpu{i}.recovery_action = {action}
"""


def _scenario(path: Path, count: int, action: int = 0, extra: str = "") -> None:
    text = f"driver_version = 550.54.15\ndevice_count = {count}\n"
    text += "".join(GPU.format(i=i, action=action if i == 0 else 0) for i in range(count))
    path.write_text(text + extra)


def _check(url: str) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "gpu_exporter", "check", "--url", url, "--timeout", "5"],
                          capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    assert done.stdout.count("\n") == 1 and len(done.stdout.rstrip("\n")) <= 80, done.stdout  # NPD's protocol
    return done.returncode, done.stdout.rstrip("\n")


def _until(url: str, code: int, deadline_s: float = 30) -> str:
    """The line of the first answer with exit ``code`` (polled: the exporter judges once a cycle)."""
    deadline = time.monotonic() + deadline_s
    seen: tuple[int, str] = (-1, "")
    while time.monotonic() < deadline:
        seen = _check(url)
        if seen[0] == code:
            return seen[1]
        time.sleep(0.3)
    raise AssertionError(f"check never exited {code}; last: {seen}")


def test_check_follows_the_health_model_through_missing_reset_lost_and_stopped(
    fakenvml_dir: Path, tmp_path: Path
) -> None:
    scenario = tmp_path / "host.scn"
    _scenario(scenario, 2)
    exporter = start(fakenvml_dir, scenario, tmp_path, "--expected-gpus", "3", "--gpu.rediscover-interval", "1s")
    try:
        assert _until(exporter.url, 1) == "1 of 3 GPUs missing: reboot"
        assert "gpu_exporter_gpus_expected 3.0" in exporter.metrics()
        _scenario(scenario, 3)  # the third GPU appears (a rediscovery lists it)
        assert _until(exporter.url, 0) == "OK: 3 GPUs healthy"
        _scenario(scenario, 3, action=1)  # the driver asks for a GPU reset
        assert _until(exporter.url, 1) == "GPU 0: the driver asks for recovery action 1: reset_gpu"
        _scenario(scenario, 3, action=0)
        assert _until(exporter.url, 0) == "OK: 3 GPUs healthy"
        _scenario(scenario, 3, extra="gpu2.lost_after = 0\n")  # GPU 2 falls off the bus
        assert _until(exporter.url, 1) == "GPU 2: GPU is down (lost): reboot"
    finally:
        exporter.stop()
    code, line = _check(exporter.url)
    assert code == 2 and line.startswith(f"UNKNOWN: exporter at {exporter.url} unreachable")
