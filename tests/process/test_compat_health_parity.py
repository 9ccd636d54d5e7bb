"""DCGM_EXP_GPU_HEALTH_STATUS on both backends: the same 4-GPU host through NVML (the exporter on the fake
NVML) and through DCGM (DcgmBackend on the DCGM double, the real Sampler) gives the same series, byte for
byte: one per judged health watch and ALL per GPU, the worst incident's DCGM_FR_* name, DCGM's result."""

from __future__ import annotations

from pathlib import Path

from gpu_exporter.assemble import bare_sampler
from gpu_exporter.backends.dcgm import DcgmBackend
from gpu_exporter.catalogue import DEFAULT_COLLECTORS, enabled_specs
from gpu_exporter.compat.counters import load
from gpu_exporter.compat.plan import plan
from tests.dcgmfake import from_scenario
from tests.harness import SCENARIOS, start

ROW = "DCGM_EXP_GPU_HEALTH_STATUS"


def _lines(exposition: str) -> list[str]:
    return [line for line in exposition.splitlines() if line.startswith(ROW + "{")]


def test_nvml_and_dcgm_give_the_same_health_series(fakenvml_dir: Path, tmp_path: Path) -> None:
    counters = tmp_path / "counters.csv"
    counters.write_text(f"# DCGM field, Prometheus type, help\n{ROW}, gauge, GPU health by DCGM health watch.\n")
    scenario = SCENARIOS / "h100x4.scn"
    # no Xid watching on either side: the fake NVML's scenario raises Xids on a timer the DCGM double has not
    exporter = start(fakenvml_dir, scenario, tmp_path, "-f", str(counters), "--collect-interval", "1h",
                     "--no-collector.xid", env={"NODE_NAME": "gpu-node-7"})  # fmt: skip
    try:
        nvml = _lines(exporter.metrics())
    finally:
        exporter.stop()
    specs = enabled_specs(DEFAULT_COLLECTORS - {"xid"})
    compat = plan(load(str(counters)), specs, "dcgm", False, "gpu-node-7", "Hostname")
    fake = from_scenario(scenario.read_text())
    # DCGM's own health watches judge systems NVML cannot (docs/health.md): without an answer from them
    # (a failing check, within the verdict's bound) DCGM judges from the fields alone, as NVML does.
    fake.health_error = -6
    sampler = bare_sampler(DcgmBackend(lambda: fake, specs, 3600.0), specs, 3600.0, "parity", watch_events=False,
                           compat=compat)  # fmt: skip
    try:
        dcgm = _lines(sampler.run_cycle().rendered.text.decode())
    finally:
        sampler.stop()
    assert nvml == dcgm
    assert any('health_watch="ALL"' in line and line.endswith(" 20") for line in nvml), nvml
