"""GPM on the NVML backend, out of process, on the C fake and the simulator: SM activity, occupancy, pipe,
DRAM, engine and PCIe/NVLink rates computed by nvmlGpmMetricsGet from two samples (one per read), natively
and under dcgm-exporter's DCGM_FI_PROF_* names; nothing at the first read; honest absence on a GPU without
GPM and on one whose counters another profiler holds (IN_USE, counted in the self-metrics); sample
buffers allocated once per entity and freed when it goes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness import REPO, SCENARIOS, Exporter, samples, start, value

#: h100x4.scn: gpu0 is busy (GPU-Util 97 %) with few SMs active (its gpm.* levels), gpu1 has no GPM key
#: (NOT_SUPPORTED at discovery), gpu3 says isSupportedDevice = 0; here gpu2's counters are held by another profiler.
LEVELS = """
gpu2.gpm_supported = 1
gpu2.gpm.sm_util = 60
gpu2.error.nvmlGpmSampleGet = IN_USE
gpu3.gpm.sm_util = 70
"""
MIB = 1024 * 1024
#: metric (labels) → value the scenario implies for gpu0.
NATIVE = {
    ("gpu_graphics_engine_active_ratio", ()): 0.97,
    ("gpu_sm_active_ratio", ()): 0.35,
    ("gpu_sm_occupancy_ratio", ()): 0.125,
    ("gpu_tensor_pipe_active_ratio", ()): 0.08,
    ("gpu_tensor_hmma_pipe_active_ratio", ()): 0.075,
    ("gpu_dram_active_ratio", ()): 0.415,
    ("gpu_fp64_pipe_active_ratio", ()): 0.0,
    ("gpu_fp32_pipe_active_ratio", ()): 0.22,
    ("gpu_fp16_pipe_active_ratio", ()): 0.03,
    ("gpu_integer_pipe_active_ratio", ()): 0.1,
    ("gpu_pcie_transmit_with_headers_bytes_per_second", ()): 1024.0 * MIB,
    ("gpu_pcie_receive_with_headers_bytes_per_second", ()): 2048.5 * MIB,
    ("gpu_nvlink_transmit_bytes_per_second", ()): 4096.0 * MIB,
    ("gpu_nvlink_receive_bytes_per_second", ()): 512.0 * MIB,
    ("gpu_nvdec_engine_active_ratio", (("engine", "1"),)): 0.5,
}
DCGM = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.97,
    "DCGM_FI_PROF_SM_ACTIVE": 0.35,
    "DCGM_FI_PROF_SM_OCCUPANCY": 0.125,
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.08,
    "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE": 0.075,
    "DCGM_FI_PROF_DRAM_ACTIVE": 0.415,
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE": 0.0,
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE": 0.22,
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE": 0.03,
    "DCGM_FI_PROF_PIPE_INT_ACTIVE": 0.1,
    "DCGM_FI_PROF_PCIE_TX_BYTES": 1024.0 * MIB,
    "DCGM_FI_PROF_PCIE_RX_BYTES": 2048.5 * MIB,
    "DCGM_FI_PROF_NVLINK_TX_BYTES": 4096.0 * MIB,
    "DCGM_FI_PROF_NVLINK_RX_BYTES": 512.0 * MIB,
    "DCGM_FI_PROF_NVDEC1_ACTIVE": 0.5,
    "DCGM_FI_PROF_NVLINK_L0_TX_BYTES": 2048.0 * MIB,
    "DCGM_FI_PROF_NVLINK_L1_RX_BYTES": 256.0 * MIB,
}
PROFILING_CSV = REPO / "tests" / "fixtures" / "profiling-counters.csv"


def _scenario(tmp_path: Path) -> Path:
    scenario = tmp_path / "h100x4-gpm.scn"
    scenario.write_text((SCENARIOS / "h100x4.scn").read_text() + LEVELS)
    return scenario


def _start(backend: str, fakenvml_dir: Path, scenario: Path, tmp_path: Path, *args: str) -> Exporter:
    if backend == "fake":
        return start(fakenvml_dir, scenario, tmp_path, *args, trace=True)
    return start(None, None, tmp_path, "--simulate", str(scenario), *args, env={"LD_LIBRARY_PATH": ""})


Parsed = dict[str, dict[frozenset[tuple[str, str]], float]]


def _wait_for(exporter: Exporter, metric: str, expected: float | None = None, **labels: str) -> Parsed:
    """Scrape until ``metric`` has a sample (the second read), or the ``expected`` one, up to 20 s."""
    deadline = time.monotonic() + 20
    while True:
        parsed = samples(exporter.metrics())
        got = value(parsed, metric, **labels)
        if (got is not None and expected in (None, got)) or time.monotonic() > deadline:
            return parsed
        time.sleep(0.1)


@pytest.mark.parametrize("backend", ["fake", "simulate"])
def test_gpm_values_natively_and_as_dcgm_fields(backend: str, fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = _scenario(tmp_path)
    args = ("--metrics.detail=full", "--collector.nvlink", "--collect-interval", "0.3s")
    native = _start(backend, fakenvml_dir, scenario, tmp_path, *args)
    compat = _start(backend, fakenvml_dir, scenario, tmp_path, *args, "-f", str(PROFILING_CSV))
    try:
        parsed = _wait_for(native, "gpu_sm_active_ratio", gpu="0")
        dcgm = _wait_for(compat, "DCGM_FI_PROF_SM_ACTIVE", gpu="0")
        compat_log = compat.log()
    finally:
        native.stop()
        compat.stop()
    got = {(name, labels): value(parsed, name, gpu="0", **dict(labels)) for name, labels in NATIVE}
    assert got == NATIVE
    for link in "01":  # per-link NVLink rates from the GPU's one GPM sample
        assert value(parsed, "gpu_nvlink_link_transmit_bytes_per_second", gpu="0", nvlink=link) == 2048.0 * MIB
        assert value(parsed, "gpu_nvlink_link_receive_bytes_per_second", gpu="0", nvlink=link) == 256.0 * MIB
    per_link = {dict(k)["nvlink"]: v for k, v in dcgm["DCGM_FI_PROF_NVLINK_TX_BYTES_PER_LINK"].items()
                if dict(k)["gpu"] == "0"}  # fmt: skip
    assert per_link == {"0": 2048.0 * MIB, "1": 2048.0 * MIB}
    interval = value(parsed, "gpu_profiling_interval_seconds", gpu="0")
    assert interval is not None and 0.1 < interval < 5
    for gpu in "123":  # no GPM on gpu1 and gpu3, GPM held by another profiler on gpu2: absent, never 0
        assert value(parsed, "gpu_sm_active_ratio", gpu=gpu) is None
    in_use = value(parsed, "gpu_exporter_sample_errors_total", kind="in_use")
    assert in_use is not None and in_use > 0
    assert {name: value(dcgm, name, gpu="0") for name in DCGM} == DCGM
    assert value(dcgm, "DCGM_FI_PROF_SM_ACTIVE", gpu="3") is None
    assert "skipped" not in compat_log, compat_log


def test_first_read_yields_nothing_and_buffers_are_allocated_once(fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = _scenario(tmp_path)
    exporter = start(fakenvml_dir, scenario, tmp_path, "--metrics.detail=full", "--collect-interval", "1h", trace=True)
    try:
        first = samples(exporter.metrics())  # the lifespan serves after the first read: one sample only
    finally:
        exporter.stop()
    assert value(first, "gpu_sm_active_ratio", gpu="0") is None
    assert exporter.trace_path is not None
    calls = exporter.trace_path.read_text().splitlines()
    assert calls.count("nvmlGpmSampleGet gpu0") == 1
    assert "nvmlGpmMetricsGet -" not in calls
    # gpu0 and gpu2 sample (gpu1 and gpu3: no GPM at discovery, never asked); two buffers each, freed at exit.
    assert calls.count("nvmlGpmSampleAlloc -") == 4
    assert calls.count("nvmlGpmSampleFree -") == 4
    assert not any(line.startswith("nvmlGpmSampleGet gpu3") for line in calls)


def test_buffers_of_a_gone_gpu_are_freed_and_a_new_level_is_seen(fakenvml_dir: Path, tmp_path: Path) -> None:
    """GPU 2's buffers are freed by the enumeration that no longer finds it; gpu0's new level is served."""
    scenario = _scenario(tmp_path)
    exporter = start(
        fakenvml_dir, scenario, tmp_path, "--metrics.detail=full", "--collect-interval", "0.3s",
        trace=True,
    )  # fmt: skip
    try:
        _wait_for(exporter, "gpu_sm_active_ratio", gpu="0")
        text = scenario.read_text().replace("device_count", "# device_count")
        text = "\n".join(line for line in text.splitlines() if not line.startswith(("gpu2.", "gpu3.")))
        tmp = scenario.with_suffix(".tmp")
        tmp.write_text(text + "\ngpu0.gpm.sm_util = 45\n")
        os.replace(tmp, scenario)
        assert exporter.trace_path is not None
        deadline = time.monotonic() + 20
        while exporter.trace_path.read_text().count("nvmlGpmSampleFree -") < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        parsed = _wait_for(exporter, "gpu_sm_active_ratio", 0.45, gpu="0")
    finally:
        exporter.stop()
    assert exporter.trace_path.read_text().count("nvmlGpmSampleFree -") >= 2  # gpu2's two buffers
    assert value(parsed, "gpu_sm_active_ratio", gpu="0") == 0.45


def test_status_page_and_snapshot_show_sm_activity_beside_utilization(fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = _scenario(tmp_path)
    exporter = start(fakenvml_dir, scenario, tmp_path, "--metrics.detail=full", "--collect-interval", "0.3s")
    try:
        _wait_for(exporter, "gpu_sm_active_ratio", gpu="0")
        cards = exporter.get("/api/v1/status").json()["gpus"]
        page = exporter.get("/").text
    finally:
        exporter.stop()
    gpu0, gpu3 = cards[0], cards[3]
    assert (gpu0["utilization_ratio"], gpu0["sm_active_ratio"], gpu0["sm_occupancy_ratio"]) == (0.97, 0.35, 0.125)
    assert (gpu0["tensor_active_ratio"], gpu0["dram_active_ratio"], gpu0["sm_active_note"]) == (0.08, 0.415, None)
    busy = "busy but under-using its SMs: GPU-Util 97 %, SM activity 35 %"
    assert any(problem.startswith(busy) for problem in gpu0["problems"])
    assert gpu3["sm_active_ratio"] is None and "no GPM on this GPU" in gpu3["sm_active_note"]
    assert not any("under-using" in problem for problem in gpu3["problems"])  # 100 % busy, but SM activity unknown
    assert "in_use" in cards[2]["sm_active_note"] or "another profiler" in cards[2]["sm_active_note"]
    assert "<span data-field='sm_active'>35 %</span>" in page and busy in page

    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPU_EXPORTER_", "FAKE_NVML_", "NO_COLOR"))}
    env.update(FAKE_NVML_SCENARIO=str(scenario), LD_LIBRARY_PATH=str(fakenvml_dir))
    done = subprocess.run(
        [sys.executable, "-m", "gpu_exporter", "snapshot"],  # profiling is on by default
        env=env, capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    [gpu0_line] = [line for line in lines if line.startswith("[0] ")]  # after the host's (and health's) lines
    assert gpu0_line.startswith("[0] NVIDIA H100 80GB HBM3 |  71°C,  97 %, SM  35 % | "), lines
    assert f"    ! {busy} (kernels that occupy few SMs, or a serial stage)" in lines


#: An H100 in MIG mode: GPU instance 1 (one compute instance) and GPU instance 2 (two compute instances,
#: which share their GPU instance's counters: NVML samples GPM per GPU instance).
MIG_HOST = """
device_count = 1
gpu0.name = NVIDIA H100 80GB HBM3
gpu0.gpm_supported = 1
gpu0.utilization.gpu = 90
gpu0.gpm.sm_util = 50
gpu0.mig.mode = 1
gpu0.mig.0.gpu_instance_id = 1
gpu0.mig.0.compute_instance_id = 0
gpu0.mig.0.profile = 3g.40gb
gpu0.mig.0.memory.total = 42949672960
gpu0.mig.0.memory.used = 1073741824
gpu0.mig.0.gpm.sm_util = 25
gpu0.mig.0.gpm.sm_occupancy = 10
gpu0.mig.1.gpu_instance_id = 2
gpu0.mig.1.compute_instance_id = 0
gpu0.mig.1.profile = 3g.40gb
gpu0.mig.1.memory.total = 42949672960
gpu0.mig.1.memory.used = 1073741824
gpu0.mig.1.gpm.sm_util = 75
gpu0.mig.2.gpu_instance_id = 2
gpu0.mig.2.compute_instance_id = 1
gpu0.mig.2.profile = 3g.40gb
gpu0.mig.2.memory.total = 42949672960
gpu0.mig.2.memory.used = 1073741824
"""


@pytest.mark.parametrize("backend", ["fake", "simulate"])
def test_mig_reports_per_gpu_instance(backend: str, fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "h100-mig.scn"
    scenario.write_text(MIG_HOST)
    exporter = _start(backend, fakenvml_dir, scenario, tmp_path, "--metrics.detail=full", "--collect-interval", "0.3s")
    try:
        parsed = _wait_for(exporter, "gpu_sm_active_ratio", gpu="0", gpu_instance="2", compute_instance="1")
    finally:
        exporter.stop()
    got = {
        (labels.get("gpu_instance", ""), labels.get("compute_instance", "")): v
        for labels, v in ((dict(key), v) for key, v in parsed["gpu_sm_active_ratio"].items())
    }
    assert got == {("", ""): 0.5, ("1", "0"): 0.25, ("2", "0"): 0.75, ("2", "1"): 0.75}
    assert value(parsed, "gpu_sm_occupancy_ratio", gpu_instance="1") == 0.1
    if backend == "fake":
        assert exporter.trace_path is not None
        calls = exporter.trace_path.read_text().splitlines()
        # one sample per GPU instance per read: GPU instance 2's two compute instances share it
        per_gpu, per_instance = calls.count("nvmlGpmSampleGet gpu0"), calls.count("nvmlGpmMigSampleGet gpu0")
        assert per_gpu >= 2 and 2 * per_gpu - 2 <= per_instance <= 2 * per_gpu  # (the last read may be cut short)
        assert calls.count("nvmlGpmSampleAlloc -") == 6  # the GPU and its two GPU instances, two buffers each


def test_a_gap_restarts_from_a_first_sample(fakenvml_dir: Path, tmp_path: Path) -> None:
    """While another profiler holds GPU 0's counters (IN_USE for 3 s or more), nothing is served for it and
    the sample is asked again with backoff (gpm.py: 5 s, then doubling); the first value after the gap covers
    one interval from a fresh sample, never the whole gap."""
    scenario = _scenario(tmp_path)
    exporter = start(fakenvml_dir, scenario, tmp_path, "--metrics.detail=full", "--collect-interval", "0.3s")

    def rewrite(text: str) -> None:
        tmp = scenario.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, scenario)

    try:
        _wait_for(exporter, "gpu_sm_active_ratio", gpu="0")
        base = scenario.read_text()
        before = value(samples(exporter.metrics()), "gpu_exporter_sample_errors_total", kind="in_use") or 0.0
        rewrite(base + "gpu0.error.nvmlGpmSampleGet = IN_USE\n")
        deadline = time.monotonic() + 30
        while (value(samples(exporter.metrics()), "gpu_exporter_sample_errors_total", kind="in_use") or 0.0) <= before:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        held_since = time.monotonic()
        while time.monotonic() - held_since < 3.0:  # the gap being measured, not a wait for an event
            time.sleep(0.1)
        rewrite(base)
        seen: list[float] = []
        deadline = time.monotonic() + 30  # the next try comes after the backoff
        while len(seen) < 3 and time.monotonic() < deadline:
            interval = value(samples(exporter.metrics()), "gpu_profiling_interval_seconds", gpu="0")
            if interval is not None and (not seen or interval != seen[-1]):
                seen.append(interval)
            time.sleep(0.05)
    finally:
        exporter.stop()
    assert len(seen) >= 3 and max(seen) < 2.0, seen
