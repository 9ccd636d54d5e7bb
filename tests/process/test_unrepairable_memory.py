"""The unrepairable-memory flag (nvmlDeviceGetUnrepairableMemoryFlag_v1, DCGM 1507) out of process, on
the C fake and the simulator: natively as gpu_memory_unrepairable and under its DCGM name (INT64), read
right from either struct layout a driver may use ({version, flag}, or nvml.h 13.5's {flag} alone, which
overwrites the version word), absent where NVML says NOT_SUPPORTED, and asked on a slow cadence (every 60 cycles)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.harness import SCENARIOS, samples, start, value

CSV = "DCGM_FI_DEV_MEMORY_UNREPAIRABLE_FLAG, gauge, Unrepairable memory flag.\n"
#: h100x4 has gpu3 = 1 in the two-word layout; here gpu1 and gpu2 answer as one-word-layout drivers.
EXTRA = """
gpu1.memory.unrepairable = 0
gpu1.memory.unrepairable_layout = v1_flag_only
gpu2.memory.unrepairable = 1
gpu2.memory.unrepairable_layout = v1_flag_only
"""
EXPECTED = {"0": None, "1": 0.0, "2": 1.0, "3": 1.0}  # gpu0 has no key: NOT_SUPPORTED, absent (never 0)


@pytest.mark.parametrize("backend", ["fake", "simulate"])
def test_native_and_dcgm_values_on_both_layouts(backend: str, fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "h100x4-unrepairable.scn"
    scenario.write_text((SCENARIOS / "h100x4.scn").read_text() + EXTRA)
    csv = tmp_path / "fields.csv"
    csv.write_text(CSV)
    args = ("--collect-interval", "1h")
    if backend == "fake":
        native = start(fakenvml_dir, scenario, tmp_path, *args)
        compat = start(fakenvml_dir, scenario, tmp_path, "-f", str(csv), *args)
    else:
        env = {"LD_LIBRARY_PATH": ""}
        native = start(None, None, tmp_path, "--simulate", str(scenario), *args, env=env)
        compat = start(None, None, tmp_path, "--simulate", str(scenario), "-f", str(csv), *args, env=env)
    try:
        parsed, exposition = samples(native.metrics()), compat.metrics()
    finally:
        native.stop()
        compat.stop()
    assert {gpu: value(parsed, "gpu_memory_unrepairable", gpu=gpu) for gpu in "0123"} == EXPECTED
    dcgm = samples(exposition)
    assert {gpu: value(dcgm, "DCGM_FI_DEV_MEMORY_UNREPAIRABLE_FLAG", gpu=gpu) for gpu in "0123"} == EXPECTED
    # INT64: a whole number, as dcgm-exporter prints it
    assert any(line.endswith(" 1") for line in exposition.splitlines() if line.startswith("DCGM_FI_DEV_MEMORY_UNR"))


def test_asked_on_a_slow_cadence_and_never_again_when_unsupported(fakenvml_dir: Path, tmp_path: Path) -> None:
    exporter = start(
        fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "--collect-interval", "1s", trace=True, wait_for="/readyz"
    )
    try:
        time.sleep(3.5)
        assert exporter.trace_path is not None
        lines = exporter.trace_path.read_text().splitlines()
    finally:
        exporter.stop()
    calls = [line for line in lines if "nvmlDeviceGetUnrepairableMemoryFlag_v1" in line]
    assert len(calls) == 4, calls  # every 60 cycles: once per GPU (gpu0's NOT_SUPPORTED included) in 3 s
