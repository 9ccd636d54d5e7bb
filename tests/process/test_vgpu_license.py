"""The vGPU software licence (nvmlDeviceGetGridLicensableFeatures_v4, DCGM 526) out of process, on the C
fake and the simulator, read by DCGM's rule: natively as gpu_vgpu_licensed and under its DCGM name
(INT64) from the default counters list; 0 on a bare-metal GPU (licensing not supported), 1 or 0 from the
listed vGPU feature's state, absent where no vGPU feature is listed or NVML answers an error (and the
error remembered: NOT_SUPPORTED is not asked again); asked on a slow cadence (every 60 cycles)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpu_exporter.compat.counters import defaults
from tests.harness import SCENARIOS, Exporter, samples, start, value

#: h100x4's GPUs are bare metal (no vgpu_license keys); here gpu0 holds a licence, gpu1 is a vGPU guest
#: without one (a licensed RTX feature listed first), gpu2's driver lists only an RTX feature and gpu3's
#: call fails.
EXTRA = """
gpu0.vgpu_license.supported = 1
gpu0.vgpu_license.state = 1
gpu1.vgpu_license.supported = 1
gpu1.vgpu_license.rtx_state = 1
gpu1.vgpu_license.state = 0
gpu2.vgpu_license.supported = 1
gpu2.vgpu_license.rtx_state = 1
gpu3.error.nvmlDeviceGetGridLicensableFeatures_v4 = UNKNOWN
"""
EXPECTED = {"0": 1.0, "1": 0.0, "2": None, "3": None}
BARE_METAL = dict.fromkeys("0123", 0.0)


def _start(backend: str, fakenvml_dir: Path, scenario: Path, tmp_path: Path, *args: str) -> Exporter:
    if backend == "fake":
        return start(fakenvml_dir, scenario, tmp_path, *args)
    return start(None, None, tmp_path, "--simulate", str(scenario), *args, env={"LD_LIBRARY_PATH": ""})


@pytest.mark.parametrize("backend", ["fake", "simulate"])
@pytest.mark.parametrize(("extra", "expected"), [("", BARE_METAL), (EXTRA, EXPECTED)], ids=["bare-metal", "vgpu"])
def test_native_and_default_counters_values(
    backend: str, extra: str, expected: dict[str, float | None], fakenvml_dir: Path, tmp_path: Path
) -> None:
    scenario = tmp_path / "h100x4-vgpu.scn"
    scenario.write_text((SCENARIOS / "h100x4.scn").read_text() + extra)
    csv = tmp_path / "default-counters.csv"  # the default list's row, as dcgm-exporter ships it
    csv.write_text("".join(f"{row.field}, {row.type}, {row.help}\n" for row in defaults() if "VGPU" in row.field))
    args = ("--collect-interval", "1h")
    native = _start(backend, fakenvml_dir, scenario, tmp_path, "--metrics.detail=full", *args)
    compat = _start(backend, fakenvml_dir, scenario, tmp_path, "-f", str(csv), *args)
    try:
        parsed, exposition = samples(native.metrics()), compat.metrics()
        log = compat.log()
    finally:
        native.stop()
        compat.stop()
    assert {gpu: value(parsed, "gpu_vgpu_licensed", gpu=gpu) for gpu in "0123"} == expected
    dcgm = samples(exposition)
    assert {gpu: value(dcgm, "DCGM_FI_DEV_VGPU_LICENSE_STATUS", gpu=gpu) for gpu in "0123"} == expected
    assert "DCGM_FI_DEV_VGPU_LICENSE_STATUS skipped" not in log
    lines = [line for line in exposition.splitlines() if line.startswith("DCGM_FI_DEV_VGPU_LICENSE_STATUS{")]
    assert lines and all(line.endswith((" 0", " 1")) for line in lines)  # INT64: whole numbers


def test_asked_on_a_slow_cadence_and_never_again_when_unsupported(fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "h100x4-vgpu.scn"
    scenario.write_text(
        (SCENARIOS / "h100x4.scn").read_text() + "gpu1.error.nvmlDeviceGetGridLicensableFeatures_v4 = NOT_SUPPORTED\n"
    )
    exporter = start(
        fakenvml_dir, scenario, tmp_path, "--collect-interval", "1s", "--metrics.detail=full", trace=True,
        wait_for="/readyz",
    )  # fmt: skip
    try:
        time.sleep(3.5)
        assert exporter.trace_path is not None
        lines = exporter.trace_path.read_text().splitlines()
        parsed = samples(exporter.metrics())
    finally:
        exporter.stop()
    calls = [line for line in lines if "nvmlDeviceGetGridLicensableFeatures_v4" in line]
    assert len(calls) == 4, calls  # every 60 cycles: once per GPU (gpu1's NOT_SUPPORTED included) in 3 s
    assert value(parsed, "gpu_vgpu_licensed", gpu="1") is None and value(parsed, "gpu_vgpu_licensed", gpu="0") == 0
