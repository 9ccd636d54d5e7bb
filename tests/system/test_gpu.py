"""On a host with a real NVIDIA GPU: the exporter's values against ``nvidia-smi --query-gpu``.

Marked ``gpu``; skipped (with the reason shown by ``-ra``) wherever nvidia-smi or a driver is
missing. Values that move between two reads (power, clocks, utilisation, temperature) are compared
with a tolerance; static ones (identity, memory total, limits, PCIe maximums) exactly.
"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.harness import samples, start, value

pytestmark = pytest.mark.gpu

# nvidia-smi field → (metric, factor from nvidia-smi's unit to the base unit, tolerance in base units)
FIELDS: dict[str, tuple[str, float, float]] = {
    "memory.total": ("gpu_memory_total_bytes", 1024 * 1024, 1024 * 1024),  # nvidia-smi rounds to MiB
    "memory.used": ("gpu_memory_used_bytes", 1024 * 1024, 512 * 1024 * 1024),
    "temperature.gpu": ("gpu_temperature_celsius", 1, 3),
    "power.draw": ("gpu_power_watts", 1, 60),
    "enforced.power.limit": ("gpu_power_limit_watts", 1, 1),
    "clocks.max.sm": ("gpu_sm_clock_max_hertz", 1e6, 1e6),
    "clocks.max.memory": ("gpu_memory_clock_max_hertz", 1e6, 1e6),
    "pcie.link.gen.max": ("gpu_pcie_link_generation_max", 1, 0),
    "pcie.link.width.max": ("gpu_pcie_link_width_max", 1, 0),
    "utilization.gpu": ("gpu_utilization_ratio", 0.01, 0.5),
}


def _nvidia_smi() -> list[dict[str, str]]:
    binary = shutil.which("nvidia-smi")
    if binary is None:
        pytest.skip("no nvidia-smi on this host: the gpu tests need a real NVIDIA GPU and driver")
    query = ["index", "uuid", "name", "pci.bus_id", *FIELDS]
    result = subprocess.run(
        [binary, f"--query-gpu={','.join(query)}", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        pytest.skip(f"nvidia-smi failed ({result.returncode}): {result.stderr.strip()}")
    rows = list(csv.reader(io.StringIO(result.stdout), skipinitialspace=True))
    return [dict(zip(query, row, strict=True)) for row in rows]


def test_exporter_agrees_with_nvidia_smi(tmp_path: Path) -> None:
    gpus = _nvidia_smi()
    exporter = start(None, None, tmp_path, "--backend", "nvml", "--collect-interval", "1s", wait_for="/readyz")
    try:
        parsed = samples(exporter.metrics())
    finally:
        exporter.stop()
    assert len({dict(labels)["uuid"] for labels in parsed["gpu_info"]}) == len(gpus)
    for gpu in gpus:
        labels = {"gpu": gpu["index"], "uuid": gpu["uuid"]}
        assert value(parsed, "gpu_info", name=gpu["name"], **labels) == 1
        for field, (metric, factor, tolerance) in FIELDS.items():
            reported = gpu[field]
            got = value(parsed, metric, **labels)
            if reported.startswith("[") or reported in ("N/A", ""):  # [N/A], [Not Supported]
                assert got is None, f"{metric}: exporter says {got}, nvidia-smi says {reported}"
                continue
            assert got is not None, f"{metric} missing, nvidia-smi says {reported}"
            assert abs(got - float(reported) * factor) <= tolerance, f"{metric}: {got} vs nvidia-smi {reported}"
