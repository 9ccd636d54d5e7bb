"""DCGM_FI_DEV_SRAM_EXCEEDED and the C2C byte rates (DCGM_FI_PROF_C2C_*) in dcgm-exporter mode, on both
backends where the GPU can say them: NVML's nvmlDeviceGetSramEccErrorStatus (bThresholdExceeded) and GPM's
C2C metrics (MiB/s), DCGM's fields 346 and 1076-1079 (the same reads, the rates × 2^20 as INT64). A GPU
that cannot answer (no key in the scenario: NOT_SUPPORTED) has no series; values are the scenario's. Under
4.9's profile GPU 0's profiling support decides, so GPU 0's C2C is served though its neighbours have none;
4.10 collects only the profiling fields every GPU has (the last test)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_exporter.assemble import bare_sampler
from gpu_exporter.backends.dcgm import DcgmBackend
from gpu_exporter.backends.nvml import NvmlBackend
from gpu_exporter.catalogue import DEFAULT_COLLECTORS, enabled_specs
from gpu_exporter.compat.counters import parse
from gpu_exporter.compat.plan import needed_collectors, plan
from tests.dcgmfake import double as double_value
from tests.dcgmfake import from_scenario, int64
from tests.harness import SCENARIOS, samples, value
from tests.unit.nvml_doubles import DOUBLES, Load, nvml_double

MIB = 1024 * 1024
#: (DCGM name, scenario key on GPU 0, MiB/s): GPU 0 has C2C, the others do not.
C2C = (
    ("DCGM_FI_PROF_C2C_TX_ALL_BYTES", "c2c_total_tx_per_sec", 300.0),
    ("DCGM_FI_PROF_C2C_TX_DATA_BYTES", "c2c_data_tx_per_sec", 250.0),
    ("DCGM_FI_PROF_C2C_RX_ALL_BYTES", "c2c_total_rx_per_sec", 200.5),
    ("DCGM_FI_PROF_C2C_RX_DATA_BYTES", "c2c_data_rx_per_sec", 150.0),
)
CSV = "DCGM_FI_DEV_SRAM_EXCEEDED, gauge, SRAM ECC threshold exceeded.\n" + "".join(
    f"{name}, gauge, {name}.\n" for name, _key, _rate in C2C
)
#: GPU 0 past its SRAM threshold, GPU 1 not, GPUs 2 and 3 not answering (an older GPU, or no root).
EXTRA = "gpu0.ecc.sram.threshold_exceeded = 1\ngpu1.ecc.sram.threshold_exceeded = 0\n" + "".join(
    f"gpu0.gpm.{key} = {rate}\n" for _name, key, rate in C2C
)


def _check(text: str, c2c_scale: float) -> None:
    parsed = samples(text)
    assert value(parsed, "DCGM_FI_DEV_SRAM_EXCEEDED", gpu="0") == 1.0
    assert value(parsed, "DCGM_FI_DEV_SRAM_EXCEEDED", gpu="1") == 0.0
    assert {dict(labels)["gpu"] for labels in parsed["DCGM_FI_DEV_SRAM_EXCEEDED"]} == {"0", "1"}
    for name, _key, rate in C2C:
        assert value(parsed, name, gpu="0") == pytest.approx(rate * c2c_scale), name
        assert {dict(labels)["gpu"] for labels in parsed[name]} == {"0"}, name  # no C2C elsewhere: absent


def test_on_dcgm_fields_346_and_1076_to_1079() -> None:
    rows = parse(CSV, "test counters")
    specs = enabled_specs(DEFAULT_COLLECTORS | needed_collectors(rows, "dcgm"))
    compat = plan(rows, specs, "dcgm", True, "gpu-node-7", "hostname", release="4.9")
    fake = from_scenario((SCENARIOS / "h100x4.scn").read_text() + EXTRA, profiling=frozenset(range(1076, 1080)))
    sampler = bare_sampler(DcgmBackend(lambda: fake, specs, 3600.0), specs, 3600.0, "t", compat=compat)
    try:
        text = sampler.run_cycle().rendered.text.decode()
    finally:
        sampler.stop()
    _check(text, MIB)  # DCGM's INT64 bytes/s: MiB/s × 2^20, whole here


@pytest.fixture(params=DOUBLES)
def double(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Load]:
    with nvml_double(request.param, request, monkeypatch) as load:
        yield load


def test_on_nvml_sram_status_and_gpm_c2c(double: Load, tmp_path: Path) -> None:
    scenario = tmp_path / "host.scn"
    scenario.write_text((SCENARIOS / "h100x4.scn").read_text() + EXTRA)
    double(scenario)
    rows = parse(CSV, "test counters")
    specs = enabled_specs(DEFAULT_COLLECTORS | needed_collectors(rows, "nvml"))
    compat = plan(rows, specs, "nvml", True, "gpu-node-7", "hostname", release="4.9")
    sampler = bare_sampler(NvmlBackend(), specs, 3600.0, "t", compat=compat)
    try:
        sampler.run_cycle()  # GPM: a rate needs two samples
        text = sampler.run_cycle().rendered.text.decode()
    finally:
        sampler.stop()
    _check(text, MIB)


PROFILING_CSV = "DCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, engine.\nDCGM_FI_PROF_PCIE_TX_BYTES, gauge, pcie tx.\n"


def _mixed(release: str, lacking_gpu: int) -> dict[str, set[str]]:
    """Which GPUs serve each profiling row on a node where GPU ``lacking_gpu`` has no PCIe profiling (1009)."""
    rows = parse(PROFILING_CSV, "test counters")
    specs = enabled_specs(DEFAULT_COLLECTORS | needed_collectors(rows, "dcgm"))
    compat = plan(rows, specs, "dcgm", True, "gpu-node-7", "hostname", release=release)
    fake = from_scenario((SCENARIOS / "h100x4.scn").read_text(), profiling=frozenset(range(1001, 1013)))
    fake.profiling_support[lacking_gpu] = frozenset(range(1001, 1009))  # an older model beside the others
    for gpu in fake.profiling_support:
        fake.values[(1, gpu)].update({1001: double_value(0.5), 1009: int64(1000)})
    sampler = bare_sampler(DcgmBackend(lambda: fake, specs, 3600.0), specs, 3600.0, "t", compat=compat)
    try:
        sampler.run_cycle()  # the first read tells which GPU lacks what
        parsed = samples(sampler.run_cycle().rendered.text.decode())
    finally:
        sampler.stop()
    return {name: {dict(labels)["gpu"] for labels in parsed.get(name, {})} for name in ("DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "DCGM_FI_PROF_PCIE_TX_BYTES")}  # fmt: skip


@pytest.mark.parametrize(
    ("release", "lacking_gpu", "pcie"),
    [("4.9", 2, {"0", "1", "3"}), ("4.9", 0, set()), ("4.10", 2, set()), ("4.10", 0, set())],
)
def test_mixed_model_node_profiling_rule_per_release(release: str, lacking_gpu: int, pcie: set[str]) -> None:
    """Up to 4.9 GPU 0's profiling support decides which fields are collected (a GPU lacking one has no
    series); 4.10 collects the fields common to all selected GPUs."""
    served = _mixed(release, lacking_gpu)
    assert served["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == {"0", "1", "2", "3"}
    assert served["DCGM_FI_PROF_PCIE_TX_BYTES"] == pcie
