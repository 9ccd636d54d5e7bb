"""A counters file written for dcgm-exporter 4.10 (4.9's DCGM 4.7 names, 4.10's profiling names, the
exporter-owned cumulative Xid total and health series) on the real exporter process, on ``--simulate``
and on the fake NVML: it starts (never exit 2), says the profile it chose in one start-up line and the
rows it cannot serve in another, and serves each row under its name in that name's unit."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness import REPO, SCENARIOS, samples, start, value
from tests.process.test_exporter_e2e import scenario_values

COUNTERS = """\
DCGM_FI_DEV_SM_CLOCK, gauge, SM clock (in MHz).
DCGM_FI_DEV_SM_CLOCK_HERTZ, gauge, SM clock (in Hz).
DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).
DCGM_FI_DEV_GPU_UTIL_RATIO, gauge, GPU utilization (ratio).
DCGM_FI_DEV_FB_USED, gauge, Framebuffer used (in MiB).
DCGM_FI_DEV_FB_USED_BYTES, gauge, Framebuffer used (in bytes).
DCGM_FI_DEV_FB_CAPACITY_BYTES, gauge, Total GPU memory (in bytes).
DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND, gauge, PCIe TX (bytes per second).
DCGM_FI_SYSTEM_GPU_QUANTITY, gauge, GPUs on the node.
DCGM_FI_CUDA_DRIVER_VERSION, gauge, CUDA driver version.
DCGM_FI_PROF_PCIE_TX_BYTES_TOTAL, counter, PCIe bytes sent.
DCGM_EXP_XID_ERRORS_TOTAL, counter, Xids since start.
DCGM_EXP_GPU_HEALTH_STATUS, gauge, Health.
DCGM_FI_SYSTEM_DRIVER_VERSION, label, Driver Version
"""
SIMULATED = REPO / "src" / "gpu_exporter" / "simulate" / "scenarios" / "default.scn"
PCIE_BYTES = "\ngpu0.pcie.tx_bytes = 987654321012\n"


@pytest.mark.parametrize("where", ["simulate", "fake"])
def test_a_4_10_counters_file_loads_and_serves_each_name_in_its_unit(
    fakenvml_dir: Path, tmp_path: Path, where: str
) -> None:
    csv = tmp_path / "counters-4.10.csv"
    csv.write_text(COUNTERS)
    # the scenario, with GPU 0's PCIe byte count (NVML field 197) added
    scenario = tmp_path / "host.scn"
    scenario.write_text((SIMULATED if where == "simulate" else SCENARIOS / "h100x4.scn").read_text() + PCIE_BYTES)
    if where == "simulate":
        env = {"LD_LIBRARY_PATH": "", "NODE_NAME": "n7"}
        exporter = start(None, None, tmp_path, "--simulate", str(scenario), "-f", str(csv), env=env)
    else:
        exporter = start(fakenvml_dir, scenario, tmp_path, "-f", str(csv), env={"NODE_NAME": "n7"})
    try:
        parsed = samples(exporter.metrics())
        log = exporter.log()
    finally:
        exporter.stop()
    facts = scenario_values(scenario)
    assert log.count("dcgm-exporter profile 4.10 (dcgm-exporter 4.10.0, DCGM 4.8.0)") == 1, log
    assert "names DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND" in log
    skipped = [line for line in log.splitlines() if "cannot be served" in line]
    assert skipped == []  # every row of 4.10's names is served, DCGM_EXP_GPU_HEALTH_STATUS too (the health model)
    assert "profiling fields (DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND)" in log  # the byte total is a pcie field
    gpu0 = {"gpu": "0", "hostname": "n7", "DCGM_FI_SYSTEM_DRIVER_VERSION": facts["driver_version"]}
    mhz = value(parsed, "DCGM_FI_DEV_SM_CLOCK", **gpu0)
    assert mhz == float(facts["gpu0.clock.sm"]) and value(parsed, "DCGM_FI_DEV_SM_CLOCK_HERTZ", **gpu0) == mhz * 1e6
    percent = value(parsed, "DCGM_FI_DEV_GPU_UTIL", **gpu0)
    assert percent is not None and value(parsed, "DCGM_FI_DEV_GPU_UTIL_RATIO", **gpu0) == pytest.approx(percent / 100)
    assert value(parsed, "DCGM_FI_DEV_FB_USED_BYTES", **gpu0) == float(facts["gpu0.memory.used"])
    assert value(parsed, "DCGM_FI_DEV_FB_USED", **gpu0) == int(facts["gpu0.memory.used"]) // 2**20
    assert value(parsed, "DCGM_FI_DEV_FB_CAPACITY_BYTES", **gpu0) == float(facts["gpu0.memory.total"])
    gpus = len({dict(labels)["gpu"] for labels in parsed["DCGM_FI_SYSTEM_GPU_QUANTITY"]})
    assert value(parsed, "DCGM_FI_SYSTEM_GPU_QUANTITY", **gpu0) == gpus
    assert value(parsed, "DCGM_FI_CUDA_DRIVER_VERSION", **gpu0) == float(facts["cuda_driver_version"])
    assert value(parsed, "DCGM_EXP_XID_ERRORS_TOTAL_total", **gpu0) is not None
    assert value(parsed, "DCGM_FI_PROF_PCIE_TX_BYTES_TOTAL_total", **gpu0) == 987654321012
    assert value(parsed, "DCGM_FI_PROF_PCIE_TX_BYTES_TOTAL_total", gpu="1") is None  # GPU 1: NVML says not supported
    assert value(parsed, "gpu_exporter_build_info", dcgm_exporter_release="4.10") == 1.0
