"""Parity: one host state through both backends gives the same exposition for every metric both
provide: same names, labels and values.

NVML side: the real exporter process on the fake NVML (``--backend nvml``). DCGM side: the
DcgmBackend on tests/dcgmfake.py, fed the same scenario converted into DCGM's raw units by the
catalogue's own scales (MiB, W, mJ, %, MHz, ns), driven by the real Sampler in process.

DCGM reports framebuffer sizes in whole MiB where NVML reports bytes, so a byte count that is not a
whole number of MiB differs by less than 1 MiB by design; the scenarios are first rounded to whole
MiB so that every other difference shows. ``board_part_number`` has no DCGM field and is left out
of the ``gpu_info`` comparison.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from gpu_exporter.assemble import bare_sampler
from gpu_exporter.backends.dcgm import DcgmBackend
from gpu_exporter.backends.dcgm.releases import known_ids, parse_version
from gpu_exporter.catalogue import BY_KEY, DEFAULT_COLLECTORS, FIXED, METRICS, enabled_specs, links
from tests.dcgmfake import from_scenario, scenario_keys
from tests.harness import SCENARIOS, VOLATILE, Labels, samples, start

MIB = 1024 * 1024
#: Metrics only one backend can give, by design (NVML counts processes and per-link NVLink bytes;
#: DCGM has no such field, only a whole-MB/s NVLink rate).
NVML_ONLY = {
    "gpu_compute_processes",
    "gpu_idle_while_allocated_seconds_total",
    "gpu_utilization_low_seconds_total",  # while held: by the process count, as the row above
    "gpu_utilization_high_seconds_total",
    "gpu_power_peak_watts",  # from NVML's sample buffers (nvmlDeviceGetSamples)
    "gpu_sm_clock_busy_min_hertz",
    "gpu_nvlink_transmit_bytes_total",
    "gpu_nvlink_receive_bytes_total",
    "gpu_nvlink_state",  # NVML's raw 0-3: DCGM has it only as link-entity field 1508, not read by that backend
    "gpu_nvlink_port_transmit_wait_total",  # link-entity field 1509, likewise
    # NVLink5 port counters: the DCGM backend does not read DCGM's link entities
    *(spec.name for spec in links.ROWS if spec.dcgm is None),
}
UNCOMPARED_LABELS = {"board_part_number"}


def whole_mib(text: str) -> str:
    """Round memory.used/reserved down to whole MiB and recompute memory.free."""
    keys = scenario_keys(text)
    lines = []
    for line in text.splitlines():
        match = re.match(r"^(gpu\d+)\.memory\.(used|reserved|free) = (\d+)$", line)
        if match is None:
            lines.append(line)
            continue
        gpu, what, number = match.groups()
        if what == "free":
            continue
        lines.append(f"{gpu}.memory.{what} = {int(number) // MIB * MIB}")
        if what == "used" and f"{gpu}.memory.total" in keys:
            used = int(number) // MIB * MIB
            reserved = int(keys.get(f"{gpu}.memory.reserved", "0")) // MIB * MIB
            lines.append(f"{gpu}.memory.free = {int(keys[f'{gpu}.memory.total']) - used - reserved}")
    return "\n".join(lines) + "\n"


def comparable(text: str) -> dict[str, dict[Labels, float]]:
    """Device metrics of an exposition (no self-metrics, no run-dependent values)."""
    volatile = {match.group(1) for match in VOLATILE.finditer(text) if match.group(1)}
    parsed = samples(text)
    out = {}
    for name, series in parsed.items():
        if name.startswith("gpu_exporter_") or name in volatile:
            continue
        out[name] = {
            frozenset((k, v) for k, v in labels if k not in UNCOMPARED_LABELS): value
            for labels, value in series.items()
        }
    return out


def dcgm_exposition(text: str, collectors: frozenset[str] = DEFAULT_COLLECTORS, release: str = "4.6.0") -> str:
    specs = enabled_specs(collectors)
    fake = from_scenario(text)
    fake.release = release
    fake.__post_init__()
    sampler = bare_sampler(DcgmBackend(lambda: fake, specs, 3600.0), specs, 3600.0, "parity", watch_events=True)
    try:
        return sampler.run_cycle().rendered.text.decode()
    finally:
        sampler.stop()


@pytest.mark.parametrize(("scenario", "extra"), [("h100x4.scn", ()), ("mig.scn", ()), ("h100x4.scn", ("nvlink",))])
def test_shared_metrics_have_the_same_exposition(
    fakenvml_dir: Path, tmp_path: Path, scenario: str, extra: tuple[str, ...]
) -> None:
    text = whole_mib((SCENARIOS / scenario).read_text())
    path = tmp_path / scenario
    path.write_text(text)
    flags = [f"--collector.{name}" for name in extra]
    full = ("--metrics.detail", "full")  # every row, as the in-process DCGM sampler renders
    exporter = start(fakenvml_dir, path, tmp_path, "--backend", "nvml", "--collect-interval", "1h", *full, *flags)
    try:
        nvml = comparable(exporter.metrics())
    finally:
        exporter.stop()
    dcgm = comparable(dcgm_exposition(text, DEFAULT_COLLECTORS | set(extra)))
    shared = set(nvml) & set(dcgm)
    # Not vacuous: every catalogue metric with both sources that NVML served is served by DCGM too.
    both = {spec.name for spec in METRICS if spec.nvml is not None and spec.dcgm is not None}
    assert both & set(nvml) <= set(dcgm), sorted(both & set(nvml) - set(dcgm))
    assert set(nvml) - shared <= NVML_ONLY, sorted(set(nvml) - shared)
    assert set(dcgm) - shared == set(), sorted(set(dcgm) - shared)
    assert {"gpu_info", "gpu_up", "gpu_power_watts", "gpu_memory_used_bytes", "gpu_xid_errors_total"} <= shared
    if "nvlink" in extra:
        assert {"gpu_nvlink_up", "gpu_nvlink_errors_total"} <= shared
        assert 0.0 in nvml["gpu_nvlink_up"].values(), "a down link is compared too"
    for name in sorted(shared):
        assert dcgm[name] == nvml[name], f"{name}: DCGM {dcgm[name]} != NVML {nvml[name]}"
    assert set(FIXED) >= {"gpu_info", "gpu_mig_info"}


@pytest.mark.parametrize("release", ["3.3.9", "4.4.2", "4.6.0"])
def test_each_dcgm_release_serves_what_it_knows_equal_to_nvml(fakenvml_dir: Path, tmp_path: Path, release: str) -> None:
    """Default flags on an engine of each release: every metric whose DCGM field that release knows
    is served, equal to the NVML backend's; what the release lacks is absent (never wrong)."""
    text = whole_mib((SCENARIOS / "h100x4.scn").read_text())
    path = tmp_path / "h100x4.scn"
    path.write_text(text)
    full = ("--metrics.detail", "full")  # every row, as the in-process DCGM sampler renders
    exporter = start(fakenvml_dir, path, tmp_path, "--backend", "nvml", "--collect-interval", "1h", *full)
    try:
        nvml = comparable(exporter.metrics())
    finally:
        exporter.stop()
    dcgm = comparable(dcgm_exposition(text, DEFAULT_COLLECTORS, release))
    known = known_ids(parse_version(release) or (4, 6, 0))
    sources = {spec.name: spec.dcgm for spec in METRICS if spec.nvml is not None and spec.dcgm is not None}
    expected = {
        name for name, source in sources.items()
        if name in nvml and (source.call or source.field_id in known or any(f in known for f in source.links))
    }  # fmt: skip
    assert expected <= set(dcgm), sorted(expected - set(dcgm))
    assert {"gpu_power_watts", "gpu_temperature_celsius", "gpu_memory_used_bytes"} <= expected
    assert "gpu_up" in dcgm and dcgm["gpu_up"] == nvml["gpu_up"]
    for name in sorted(set(dcgm) & set(nvml) - {"gpu_info"}):
        # A family read from several fields (ECC by location) has fewer series where a field is unknown.
        if release == "4.6.0":
            assert dcgm[name] == nvml[name], f"{release} {name}: DCGM {dcgm[name]} != NVML {nvml[name]}"
        elif name not in ("gpu_health_status", "gpu_health_action"):
            wrong = {labels: v for labels, v in dcgm[name].items() if nvml[name].get(labels) != v}
            assert not wrong, f"{release} {name}: {wrong}"
        # The health model judges from what the release serves: without 1507 (unrepairable memory) and
        # 1523 (recovery action), older releases cannot see GPU 3's unrepairable memory; 4.6.0 sees all.
    identity = {"gpu", "uuid", "name", "pci_bus_id", "driver_version", "serial"}
    assert {frozenset((k, v) for k, v in labels if k in identity) for labels in dcgm["gpu_info"]} == {
        frozenset((k, v) for k, v in labels if k in identity) for labels in nvml["gpu_info"]
    }


def every_field_csv() -> str:
    """A dcgm-exporter counters CSV naming every DCGM field gpu-exporter serves: each catalogue row's
    compat name, each composed field and each label field, under DCGM's first name for the id."""
    from gpu_exporter.compat.field_names import BASE_UNIT_NAMES, FIELD_IDS
    from gpu_exporter.compat.fields import COMPOSED, FB_USED_RATIO, HOST_VALUES, IDENTITY_VALUES, LINK_ENTITY_FIELDS
    from gpu_exporter.compat.plan import LABEL_FIELDS

    first: dict[int, str] = {}
    for name, number in {**FIELD_IDS, **BASE_UNIT_NAMES}.items():
        first.setdefault(number, name)
    # Rows both backends read (the NVLink5 bit error rates are NVML's only).
    rows = [f"{spec.compat_name}, {spec.kind}, row {spec.name}" for spec in METRICS if spec.compat_name and spec.dcgm]
    # Composed fields both backends can compose (the NVLink5 counters are NVML's only), and the link entities.
    both = [n for n in sorted(COMPOSED) if all(BY_KEY[key].dcgm is not None for key in COMPOSED[n].keys)]
    rows += [f"{first[number]}, gauge, composed {number}" for number in both]
    rows += [
        f"{first[number]}, gauge, link entity {number}"
        for number, key in sorted(LINK_ENTITY_FIELDS.items())
        if BY_KEY[key].dcgm is not None  # 1508 (the raw link state) is NVML's only
    ]
    # Identity (read at discovery) as values and as label fields, and the P2P pseudo-field.
    rows += [f"{first[number]}, gauge, identity {number}" for number in sorted(IDENTITY_VALUES)]
    rows += [f"{first[number]}, gauge, host {number}" for number in sorted(HOST_VALUES)]
    rows += [f"{first[number]}, label, label {number}" for number in sorted(LABEL_FIELDS)]
    rows += ["DCGM_EXP_P2P_STATUS, gauge, P2P status", f"{first[FB_USED_RATIO]}, gauge, used ratio"]
    return "# every field gpu-exporter serves\n" + "\n".join(rows) + "\n"


@pytest.mark.parametrize(("scenario", "extra"), [("h100x4.scn", ("nvlink",)), ("mig.scn", ())])
def test_every_served_field_is_byte_identical_in_dcgm_exporter_mode(
    fakenvml_dir: Path, tmp_path: Path, scenario: str, extra: tuple[str, ...]
) -> None:
    """Every field gpu-exporter serves in dcgm-exporter mode (not only the default list), through NVML
    (the real process) and DCGM (the backend on tests/dcgmfake.py): the same DCGM_* lines, byte for byte,
    in DCGM's types (INT64 fields whole, framebuffer and BAR1 in whole MiB)."""
    from gpu_exporter.compat.counters import load
    from gpu_exporter.compat.plan import plan
    from gpu_exporter.compat.releases import from_names

    csv = tmp_path / "every-field.csv"
    csv.write_text(every_field_csv())
    # Whole MiB, so that DCGM's whole-MiB framebuffer gives the same used ratio (254) as NVML's bytes.
    text = whole_mib((SCENARIOS / scenario).read_text())
    path = tmp_path / scenario
    path.write_text(text)
    flags = [f"--collector.{name}" for name in extra]
    exporter = start(
        fakenvml_dir, path, tmp_path, "--backend", "nvml", "-f", str(csv), "--collect-interval", "1h",
        *flags, env={"NODE_NAME": "gpu-node-7"},
    )  # fmt: skip
    try:
        nvml = exporter.metrics()
    finally:
        exporter.stop()
    specs = enabled_specs(DEFAULT_COLLECTORS | set(extra))
    # the file names DCGM 4.7's base-unit names, so the NVML process chose the 4.9 profile: its host label
    release, _why = from_names([row.field for row in load(str(csv))])
    compat_plan = plan(load(str(csv)), specs, "dcgm", True, "gpu-node-7", release.hostname_label, release=release.name)
    fake = from_scenario(text)
    sampler = bare_sampler(
        DcgmBackend(lambda: fake, specs, 3600.0), specs, 3600.0, "parity", watch_events=True, compat=compat_plan
    )
    try:
        dcgm = sampler.run_cycle().rendered.text.decode()
    finally:
        sampler.stop()

    def lines(exposition: str) -> list[str]:
        # energy grows on the NVML fake (the integral of power), under either name
        skipped = ("DCGM_FI_PROF_", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL")
        return [line for line in exposition.splitlines() if "DCGM_" in line and not any(s in line for s in skipped)]

    assert lines(nvml) == lines(dcgm)
    served = {line.split("{")[0] for line in lines(nvml) if not line.startswith("#")}
    must = {
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_USED_PERCENT",
        "DCGM_FI_DEV_MIG_MODE",
        "DCGM_FI_DEV_PCI_COMBINED_ID",
        "DCGM_FI_DEV_NVML_INDEX",
        "DCGM_FI_DEV_COUNT",
        "DCGM_FI_CUDA_DRIVER_VERSION",
        "DCGM_FI_DEV_FB_USED_BYTES",
    }
    if scenario == "h100x4.scn":
        must |= {"DCGM_EXP_P2P_STATUS", "DCGM_FI_DEV_NVLINK_P2P_STATUS", "DCGM_FI_CUDA_GPU_COMPUTE_CAPABILITY"}
        must |= {"DCGM_FI_DEV_FABRIC_MANAGER_STATUS", "DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY"}
        must |= {"DCGM_FI_DEV_PLATFORM_MODULE_ID", "DCGM_FI_DEV_PLATFORM_CHASSIS_SLOT_NUMBER"}
        must |= {"DCGM_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN_NS", "DCGM_FI_DEV_PCIE_CORRECTABLE_ERROR_TOTAL"}
        must |= {"DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION", "DCGM_FI_DEV_PWR_SMOOTHING_ENABLED"}
        must |= {"DCGM_FI_DEV_PWR_SMOOTHING_APPLIED_TMP_FLOOR", "DCGM_FI_DEV_PWR_SMOOTHING_PROFILE_RAMP_DOWN_HYST_VAL"}
        must |= {"DCGM_FI_DEV_GPM_SUPPORT", "DCGM_FI_DEV_GPU_UTIL_RATIO"}
    if "nvlink" in extra:
        must |= {"DCGM_FI_DEV_BAR1_FREE", "DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"}
        must |= {"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L0"}
    assert must <= served, sorted(must - served)


#: DCGM's profiling fields and the GPM level (scenario key) behind each: percent → ratio, MiB/s → bytes/s.
PROFILING_LEVELS = {
    1001: "graphics_util", 1002: "sm_util", 1003: "sm_occupancy", 1004: "any_tensor_util", 1005: "dram_bw_util",
    1006: "fp64_util", 1007: "fp32_util", 1008: "fp16_util", 1009: "pcie_tx_per_sec", 1010: "pcie_rx_per_sec",
    1011: "nvlink_total_tx_per_sec", 1012: "nvlink_total_rx_per_sec", 1076: "c2c_total_tx_per_sec",
    1077: "c2c_data_tx_per_sec", 1078: "c2c_total_rx_per_sec", 1079: "c2c_data_rx_per_sec",
}  # fmt: skip
#: GPU 0's C2C traffic (MiB/s): h100x4's GPU 0 has a C2C link.
C2C_LEVELS = "gpu0.gpm.c2c_total_tx_per_sec = 300\ngpu0.gpm.c2c_data_tx_per_sec = 250\n" + (
    "gpu0.gpm.c2c_total_rx_per_sec = 200\ngpu0.gpm.c2c_data_rx_per_sec = 150\n"
)


def test_profiling_families_match_between_gpm_and_dcgm(fakenvml_dir: Path, tmp_path: Path) -> None:
    """The same activity through GPM (NVML, two samples) and DCGM's profiling fields (the DCGM fake given
    those levels as DCGM stores them: ratios as doubles, bytes/s as INT64): the same families and values."""
    from tests.dcgmfake import FE_GPU, double, int64

    text = whole_mib((SCENARIOS / "h100x4.scn").read_text()) + C2C_LEVELS
    path = tmp_path / "h100x4.scn"
    path.write_text(text)
    exporter = start(fakenvml_dir, path, tmp_path, "--backend", "nvml", "--metrics.detail=full", "-c", "300")
    try:
        deadline = time.monotonic() + 20
        nvml = comparable(exporter.metrics())
        while "gpu_sm_active_ratio" not in nvml and time.monotonic() < deadline:
            time.sleep(0.1)
            nvml = comparable(exporter.metrics())
    finally:
        exporter.stop()
    keys = scenario_keys(text)
    fake = from_scenario(text, profiling=frozenset(PROFILING_LEVELS))
    gpm = [gpu for gpu in range(4) if keys.get(f"gpu{gpu}.gpm_supported") == "1"]
    for gpu in range(4):
        if gpu not in gpm:
            fake.profiling_support[gpu] = frozenset()  # DCGM's profiling module does not offer them either
            continue
        for field_id, level in PROFILING_LEVELS.items():
            raw = float(keys[f"gpu{gpu}.gpm.{level}"])
            fake.values[(FE_GPU, gpu)][field_id] = double(raw / 100) if field_id <= 1008 else int64(int(raw * MIB))
    specs = enabled_specs(DEFAULT_COLLECTORS | {"profiling"})
    sampler = bare_sampler(DcgmBackend(lambda: fake, specs, 3600.0), specs, 3600.0, "parity", watch_events=True)
    try:
        dcgm = comparable(sampler.run_cycle().rendered.text.decode())
    finally:
        sampler.stop()
    both = sorted({spec.name for spec in METRICS if spec.collector == "profiling" and spec.dcgm and spec.nvml})
    assert len(both) == 16 and gpm == [0]
    for name in both:
        assert name in nvml and dcgm.get(name) == nvml[name], f"{name}: DCGM {dcgm.get(name)} != NVML {nvml[name]}"
