"""ECC errors by memory location and the row-remapper histogram on the NVML backend, out of process on
the fake NVML: native ``gpu_ecc_location_errors_total{location,type,counter}`` and
``gpu_row_remap_banks{availability}``, dcgm-exporter's DCGM_FI_DEV_ECC_*_<location> (314-345) and
DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_* (385-389) from a counters CSV, read at the slow (STATIC) cadence;
a location the GPU does not report is absent and not asked again. Also the inforom's configuration
checksum and validity (DCGM 83, 84)."""

from __future__ import annotations

import collections
import time
from pathlib import Path

from tests.harness import SCENARIOS, samples, start, value

# gpu0 reports three locations: L1 (an NVML field), shared memory and SRAM (their own call only).
EXTRA = """\
gpu0.ecc.volatile.corrected.l1_cache = 4
gpu0.ecc.aggregate.uncorrected.shared_memory = 2
gpu0.ecc.aggregate.corrected.sram = 9
gpu0.row_remapper.max = 2550
gpu0.row_remapper.high = 6
gpu0.row_remapper.partial = 3
gpu0.row_remapper.low = 1
gpu0.row_remapper.none = 0
"""
CSV = """\
DCGM_FI_DEV_ECC_SBE_VOL_L1, counter, Single-bit volatile ECC errors in L1.
DCGM_FI_DEV_ECC_DBE_AGG_SHM, counter, Double-bit aggregate ECC errors in shared memory.
DCGM_FI_DEV_ECC_SBE_AGG_SRM, counter, Single-bit aggregate ECC errors in SRAM.
DCGM_FI_DEV_ECC_SBE_VOL_REG, counter, Single-bit volatile ECC errors in the register file.
DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_MAX, gauge, Banks with every spare row left.
DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_LOW, gauge, Banks with few spare rows left.
"""


def _scenario(tmp_path: Path) -> Path:
    text = "\n".join(
        line for line in (SCENARIOS / "h100x4.scn").read_text().splitlines()
        if not line.startswith(("gpu0.ecc.volatile.", "gpu0.ecc.aggregate.", "gpu0.row_remapper."))
        or line.count(".") == 3  # keep gpu0's totals (ecc.<counter>.<type>), drop its per-location keys
    )  # fmt: skip
    path = tmp_path / "ecc.scn"
    path.write_text(text + "\n" + EXTRA)
    return path


def test_native_series_by_location_and_availability(fakenvml_dir: Path, tmp_path: Path) -> None:
    exporter = start(
        fakenvml_dir, _scenario(tmp_path), tmp_path, "--collect-interval", "1s", "--metrics.detail=full", trace=True,
        wait_for="/readyz",
    )  # fmt: skip
    try:
        assert exporter.trace_path is not None
        time.sleep(1.5)
        first = exporter.trace_path.read_text().splitlines()
        exporter.trace_path.write_bytes(b"")  # the fake appends: later calls land in the empty file
        time.sleep(3.2)
        later = exporter.trace_path.read_text().splitlines()
        parsed = samples(exporter.metrics())
    finally:
        exporter.stop()
    ecc = "gpu_ecc_location_errors_total"
    assert value(parsed, ecc, gpu="0", location="l1_cache", type="corrected", counter="volatile") == 4.0
    assert value(parsed, ecc, gpu="0", location="shared_memory", type="uncorrected", counter="aggregate") == 2.0
    assert value(parsed, ecc, gpu="0", location="sram", type="corrected", counter="aggregate") == 9.0
    assert value(parsed, ecc, gpu="0", location="register_file", type="corrected", counter="volatile") is None
    assert value(parsed, ecc, gpu="0", location="sram", type="uncorrected", counter="aggregate") is None
    assert len([labels for labels in parsed[ecc] if ("gpu", "0") in labels]) == 3  # unsupported: absent, not 0
    assert value(parsed, ecc, gpu="1", location="device_memory", type="corrected", counter="aggregate") == 1.0
    banks = "gpu_row_remap_banks"
    got = {name: value(parsed, banks, gpu="0", availability=name) for name in ("max", "high", "partial", "low", "none")}
    assert got == {"max": 2550.0, "high": 6.0, "partial": 3.0, "low": 1.0, "none": 0.0}
    # The first, every-row cycle asks each location once (by field where NVML has one); later cycles
    # within the slow cadence ask nothing: no per-interval cost, and unsupported locations are memoised.
    calls = collections.Counter(line.partition(" ")[0] for line in first if line.endswith(" gpu0"))
    assert 1 <= calls["nvmlDeviceGetMemoryErrorCounter"] <= 32, calls
    assert calls["nvmlDeviceGetRowRemapperHistogram"] == 1, calls
    asked_later = [line for line in later if line.startswith(("nvmlDeviceGetMemoryError", "nvmlDeviceGetRowRemapper"))]
    assert asked_later == []


def test_dcgm_exporter_names(fakenvml_dir: Path, tmp_path: Path) -> None:
    csv = tmp_path / "ecc.csv"
    csv.write_text(CSV)
    exporter = start(fakenvml_dir, _scenario(tmp_path), tmp_path, "-f", str(csv), wait_for="/readyz")
    try:
        parsed = samples(exporter.metrics())
    finally:
        exporter.stop()
    counter = lambda name, gpu: value(parsed, f"{name}_total", gpu=gpu)  # noqa: E731 - the parser adds _total
    assert counter("DCGM_FI_DEV_ECC_SBE_VOL_L1", "0") == 4.0
    assert counter("DCGM_FI_DEV_ECC_DBE_AGG_SHM", "0") == 2.0
    assert counter("DCGM_FI_DEV_ECC_SBE_AGG_SRM", "0") == 9.0
    assert counter("DCGM_FI_DEV_ECC_SBE_AGG_SRM", "2") == 0.0  # h100x4's SRAM counts
    assert "DCGM_FI_DEV_ECC_SBE_VOL_REG_total" not in parsed  # no GPU reports its register file
    assert value(parsed, "DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_MAX", gpu="0") == 2550.0
    assert value(parsed, "DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_LOW", gpu="0") == 1.0
    assert value(parsed, "DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_MAX", gpu="3") == 2560.0


def test_inforom_checksum_and_validity(fakenvml_dir: Path, tmp_path: Path) -> None:
    csv = tmp_path / "inforom.csv"
    csv.write_text(
        "DCGM_FI_DEV_INFOROM_CONFIG_CHECK, gauge, Inforom configuration checksum.\n"
        "DCGM_FI_DEV_INFOROM_CONFIG_VALID, gauge, Whether the inforom is valid.\n"
    )
    scenario = tmp_path / "inforom.scn"
    scenario.write_text((SCENARIOS / "h100x4.scn").read_text() + "gpu1.error.nvmlDeviceValidateInforom = UNKNOWN\n")
    native = start(fakenvml_dir, scenario, tmp_path, "--metrics.detail=full", wait_for="/readyz")
    try:
        parsed = samples(native.metrics())
    finally:
        native.stop()
    assert value(parsed, "gpu_inforom_configuration_checksum", gpu="0") == 0x2F6B1C40
    assert value(parsed, "gpu_inforom_configuration_checksum", gpu="3") == 0x2F6B1C41
    assert value(parsed, "gpu_inforom_valid", gpu="0") == 1.0
    assert value(parsed, "gpu_inforom_valid", gpu="3") == 0.0  # CORRUPTED_INFOROM is a value, not an error
    assert value(parsed, "gpu_inforom_valid", gpu="1") is None  # any other error: absent
    compat = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "-f", str(csv), wait_for="/readyz")
    try:
        parsed = samples(compat.metrics())
    finally:
        compat.stop()
    assert value(parsed, "DCGM_FI_DEV_INFOROM_CONFIG_CHECK", gpu="2") == 0x2F6B1C40
    assert value(parsed, "DCGM_FI_DEV_INFOROM_CONFIG_VALID", gpu="2") == 1.0
    assert value(parsed, "DCGM_FI_DEV_INFOROM_CONFIG_VALID", gpu="3") == 0.0
