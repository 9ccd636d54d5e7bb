"""dcgm-exporter 4.8.2 to 4.10 as profiles (gpu_exporter.compat.releases): each release's shipped list
and renamed fields load, the profile follows the version or the counters file's names, and each field
is served under that release's name, in its unit, with its labels, on the DCGM fake in process; the
values are held against what the scenario implies (1980 MHz is 1.98e9 Hz under 4.9's names)."""

from __future__ import annotations

import logging
from fractions import Fraction

import pytest

from gpu_exporter.assemble import bare_sampler
from gpu_exporter.backends.dcgm import DcgmBackend
from gpu_exporter.catalogue import DEFAULT_COLLECTORS, enabled_specs
from gpu_exporter.cli import parse_settings
from gpu_exporter.compat.counters import CountersError, parse
from gpu_exporter.compat.field_names import BASE_UNIT_NAMES, EXPORTER_FIELDS, field_id
from gpu_exporter.compat.plan import needed_collectors, plan
from gpu_exporter.compat.releases import (
    BY_NAME,
    RELEASES,
    RENAMES_4_9,
    RENAMES_4_10,
    ReleaseError,
    by_version,
    from_names,
)
from gpu_exporter.config import ConfigError
from tests.dcgmfake import from_scenario
from tests.harness import SCENARIOS, energy_in_range, samples, value
from tests.process.test_exporter_e2e import scenario_values

SCENARIO = SCENARIOS / "h100x4.scn"
MIB = 1024 * 1024
#: Every name a release from 4.8.2 to 4.10 ships or serves: both sides of every rename, DCGM 4.7's
#: base-unit names and every exporter-owned series.
EVERY_NAME = sorted(
    {name for renames in (RENAMES_4_9, RENAMES_4_10) for old, new, _unit, _help in renames for name in (old, new)}
    | set(BASE_UNIT_NAMES)
    | set(EXPORTER_FIELDS)
)


def _whole_mib(text: str) -> str:
    """The scenario with framebuffer sizes in whole MiB, as DCGM reports them (so bytes compare exactly)."""
    lines = []
    for line in text.splitlines():
        key, eq, raw = line.partition("=")
        if eq and ".memory." in key and raw.strip().isdigit():
            line = f"{key}= {int(raw) // MIB * MIB}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def _render(csv: str, release: str, hostname_label: str) -> str:
    """One cycle of the h100x4 host on the DCGM fake, rendered under ``csv`` in dcgm-exporter mode."""
    rows = parse(csv, "test counters")
    specs = enabled_specs(DEFAULT_COLLECTORS | needed_collectors(rows, "dcgm"))
    compat = plan(rows, specs, "dcgm", True, "gpu-node-7", hostname_label, release=release)
    fake = from_scenario(_whole_mib(SCENARIO.read_text()))
    sampler = bare_sampler(DcgmBackend(lambda: fake, specs, 3600.0), specs, 3600.0, "t", compat=compat)
    try:
        return sampler.run_cycle().rendered.text.decode()
    finally:
        sampler.stop()


@pytest.mark.parametrize("release", [release.name for release in RELEASES])
def test_each_release_default_list_loads_and_every_row_is_known(release: str) -> None:
    rows = parse(BY_NAME[release].defaults, release)
    assert rows and all(field_id(row.field) is not None for row in rows)
    assert [row.field for row in rows if row.type == "label"] == [BY_NAME[release].driver_label]


def test_every_name_of_every_release_loads_and_none_is_an_error(caplog: pytest.LogCaptureFixture) -> None:
    """Never exit 2 for a name 4.8.2-4.10 define: rows that cannot be served are one start-up line, with reasons."""
    csv = "".join(f"{name}, gauge, {name}\n" for name in EVERY_NAME)
    rows = parse(csv, "every name")
    assert [row.field for row in rows] == EVERY_NAME
    with caplog.at_level(logging.WARNING, logger="gpu_exporter.compat"):
        plan(rows, enabled_specs(DEFAULT_COLLECTORS), "dcgm", True, "h", "hostname")
    lines = [record.getMessage() for record in caplog.records if "cannot be served" in record.getMessage()]
    assert len(lines) == 1
    assert "DCGM_EXP_XID_ERRORS_TOTAL" not in lines[0] and "DCGM_EXP_GPU_HEALTH_STATUS" not in lines[0]  # served
    with pytest.raises(CountersError, match="unknown field 'DCGM_FI_DEV_NO_SUCH_FIELD'; use a DCGM field name"):
        parse("DCGM_FI_DEV_NO_SUCH_FIELD, gauge, typo\n", "typo")
    with pytest.raises(CountersError, match="did you mean DCGM_FI_DEV_SM_CLOCK_HERTZ or DCGM_FI_DEV_SM_CLOCK"):
        parse("DCGM_FI_DEV_SM_CLOCK_HZ, gauge, typo\n", "typo")


@pytest.mark.parametrize(
    ("text", "release"),
    [
        ("4.8.2", "4.8.2"), ("4.7.1", "4.8.2"), ("4.8.3", "4.8.3"), ("4.8.4", "4.8.3"), ("4.9", "4.9"),
        ("4.9.0", "4.9"), ("4.7.0-4.9.0", "4.9"), ("4.10.0", "4.10"), ("4.8.0-4.10.0", "4.10"),
        ("nvcr.io/nvidia/k8s/dcgm-exporter:4.8.0-4.10.0-distroless", "4.10"),
        ("nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-ubuntu22.04", "4.8.2"),
    ],
)  # fmt: skip
def test_profile_from_a_version_tag_or_image(text: str, release: str) -> None:
    assert by_version(text).name == release


@pytest.mark.parametrize("text", ["4.11.0", "5.0", "latest", ""])
def test_an_unknown_version_is_an_error_naming_the_profiles(text: str) -> None:
    with pytest.raises(ReleaseError, match=r"profiles: 4\.8\.2 \(4\.8\.2\), 4\.8\.3 \(4\.8\.3/4\.8\.4\)"):
        by_version(text)


@pytest.mark.parametrize(
    ("names", "release"),
    [
        (["DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DRIVER_VERSION"], "4.8.2"),
        (["DCGM_FI_DEV_SM_CLOCK", "DCGM_EXP_XID_ERRORS_TOTAL"], "4.8.3"),
        (["DCGM_FI_DEV_SM_CLOCK_HERTZ", "DCGM_EXP_XID_ERRORS_TOTAL"], "4.9"),
        (["DCGM_FI_SYSTEM_DRIVER_VERSION"], "4.9"),
        (["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND"], "4.10"),
    ],
)
def test_profile_from_the_counters_file_names(names: list[str], release: str) -> None:
    assert from_names(names)[0].name == release


def test_each_shipped_list_is_4_8_renamed_with_the_release_notes_changes() -> None:
    old = [row.field for row in parse(BY_NAME["4.8.2"].defaults, "4.8.2")]
    assert [row.field for row in parse(BY_NAME["4.8.3"].defaults, "4.8.3")] == old
    nine = [row.field for row in parse(BY_NAME["4.9"].defaults, "4.9")]
    renamed = {old_name: new for old_name, new, _unit, _help in RENAMES_4_9}
    assert nine == [renamed.get(name, name) for name in old] + ["DCGM_FI_DEV_FB_CAPACITY_BYTES"]
    # "Rename the 23 default and profiling-preset fields ... Eleven of them also change unit" (the driver-version
    # label row among the 23); the eleventh is NVLink throughput, 449 in MB/s → 1648 in bytes/s
    assert len(RENAMES_4_9) == 23 and sum(1 for _old, _new, unit, _help in RENAMES_4_9 if unit) == 11
    assert "DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND" in nine
    ten = [row.field for row in parse(BY_NAME["4.10"].defaults, "4.10")]
    assert "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND" in ten and "DCGM_FI_PROF_PCIE_TX_BYTES" not in ten
    assert {row.field for row in parse(BY_NAME["4.10"].defaults, "4.10")} - set(nine) == {
        "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND",
        "DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND",
    }


#: (4.8 name, 4.9 name, factor from the 4.8 value to the 4.9 value) for the rows whose unit changed.
UNIT_CHANGES = [
    ("DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_SM_CLOCK_HERTZ", Fraction(10**6)),
    ("DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", Fraction(10**6)),
    ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO", Fraction(1, 100)),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_MEMORY_UTIL_RATIO", Fraction(1, 100)),
    ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_USED_BYTES", Fraction(MIB)),
    ("DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_FREE_BYTES", Fraction(MIB)),
    ("DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_FB_RESERVED_BYTES", Fraction(MIB)),
]


def test_4_9_names_in_their_units_against_the_scenario_and_the_4_8_names() -> None:
    """Under 4.10's shipped list: 1980 MHz is 1.98e9 Hz, 97 % is 0.97, 10240 MiB is 10737418240 bytes,
    the energy in whole joules; hostname and DCGM_FI_SYSTEM_DRIVER_VERSION label every series. The same
    file with 4.8 names serves the 4.8 units (old names keep working, as NVIDIA's do)."""
    scenario = scenario_values(SCENARIO)
    new = samples(_render(BY_NAME["4.10"].defaults, "4.10", "hostname"))
    old = samples(_render(BY_NAME["4.8.2"].defaults, "4.8.2", "Hostname"))
    gpu0 = {"gpu": "0", "hostname": "gpu-node-7", "DCGM_FI_SYSTEM_DRIVER_VERSION": scenario["driver_version"]}
    assert value(new, "DCGM_FI_DEV_SM_CLOCK_HERTZ", **gpu0) == 1.98e9 == int(scenario["gpu0.clock.sm"]) * 1e6
    assert value(new, "DCGM_FI_DEV_GPU_UTIL_RATIO", **gpu0) == 0.97 == int(scenario["gpu0.utilization.gpu"]) / 100
    used = int(scenario["gpu0.memory.used"]) // MIB * MIB
    assert value(new, "DCGM_FI_DEV_FB_USED_BYTES", **gpu0) == used
    total = int(scenario["gpu0.memory.total"]) // MIB * MIB
    assert value(new, "DCGM_FI_DEV_FB_CAPACITY_BYTES", **gpu0) == total
    # a counter's sample: the client library's parser appends _total to the name
    # the fake's energy counter grows by the scenario's power from the engine's start, as the driver's
    energy = value(new, "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL_total", **gpu0)
    assert energy_in_range(energy, int(scenario["gpu0.energy"]) // 1000, int(scenario["gpu0.power.usage"]) / 1000)
    assert energy is not None and energy == int(energy)  # whole joules
    assert value(new, "DCGM_FI_DEV_GPU_TEMP_CELSIUS", **gpu0) == int(scenario["gpu0.temperature.gpu"])
    assert value(old, "DCGM_FI_DEV_SM_CLOCK", gpu="0", Hostname="gpu-node-7") == 1980
    for legacy, renamed, factor in UNIT_CHANGES:
        was = value(old, legacy, gpu="0", DCGM_FI_DRIVER_VERSION=scenario["driver_version"])
        assert was is not None and value(new, renamed, **gpu0) == pytest.approx(float(was * factor)), renamed
    series = next(iter(new["DCGM_FI_DEV_SM_CLOCK_HERTZ"]))
    assert [name for name, _value in sorted(series)] == sorted(
        ["gpu", "UUID", "pci_bus_id", "device", "modelName", "hostname", "DCGM_FI_SYSTEM_DRIVER_VERSION"]
    )
    assert not any("Hostname" in dict(labels) for family in new.values() for labels in family)


def test_new_fields_nvml_and_dcgm_can_answer() -> None:
    """Device count, CUDA driver version, the cumulative Xid total (no Xid yet: one zero series) and
    clock-event total, and the build info naming the profile."""
    csv = "".join(
        f"{name}, gauge, {name}\n"
        for name in ("DCGM_FI_DEV_COUNT", "DCGM_FI_SYSTEM_GPU_QUANTITY", "DCGM_FI_CUDA_DRIVER_VERSION",
                     "DCGM_EXP_XID_ERRORS_TOTAL", "DCGM_EXP_CLOCK_EVENTS_TOTAL")
    )  # fmt: skip
    text = _render(csv, "4.8.3", "hostname")
    parsed = samples(text)
    gpus = len({dict(labels)["gpu"] for labels in parsed["DCGM_FI_DEV_COUNT"]})
    assert gpus == 4 and value(parsed, "DCGM_FI_DEV_COUNT", gpu="3") == 4.0
    assert value(parsed, "DCGM_FI_SYSTEM_GPU_QUANTITY", gpu="0") == 4.0
    cuda = int(scenario_values(SCENARIO)["cuda_driver_version"])
    assert value(parsed, "DCGM_FI_CUDA_DRIVER_VERSION", gpu="0") == cuda
    assert value(parsed, "DCGM_EXP_XID_ERRORS_TOTAL", gpu="0") == 0.0
    assert value(parsed, "gpu_exporter_build_info", dcgm_exporter_release="4.8.3") == 1.0
    # one read: each reason active in it is one event, a GPU with none active has one zero series
    clock = parsed["DCGM_EXP_CLOCK_EVENTS_TOTAL"]
    assert {dict(labels)["gpu"] for labels in clock} == {"0", "1", "2", "3"}
    assert all(v == (1.0 if "clock_event" in dict(labels) else 0.0) for labels, v in clock.items())


def test_the_version_option_and_its_variable() -> None:
    assert parse_settings(["--dcgm-exporter-version", "4.9.0"], {}).dcgm_exporter_version == "4.9.0"
    assert parse_settings([], {"DCGM_EXPORTER_VERSION": "4.8.0-4.10.0"}).dcgm_exporter_version == "4.8.0-4.10.0"
    with pytest.raises(ConfigError, match=r"--dcgm-exporter.version='4.11.0' is not allowed: use a dcgm-exporter"):
        parse_settings(["--dcgm-exporter.version", "4.11.0"], {})


@pytest.mark.parametrize(("release", "expected"), [("4.8.2", 97.0), ("4.8.3", 97.0), ("4.9", 0.97), ("4.10", 0.97)])
def test_gpu_util_ratio_is_dcgm_4_6s_percent_before_4_9_and_a_ratio_from_4_9(release: str, expected: float) -> None:
    """DCGM 4.6 spells field 203 (a percent) DCGM_FI_DEV_GPU_UTIL_RATIO; dcgm-exporter 4.9 serves the name as 0-1."""
    parsed = samples(_render("DCGM_FI_DEV_GPU_UTIL_RATIO, gauge, util\n", release, "hostname"))
    assert value(parsed, "DCGM_FI_DEV_GPU_UTIL_RATIO", gpu="0") == expected
