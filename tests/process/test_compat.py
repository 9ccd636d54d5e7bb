"""dcgm-exporter compatibility mode: its counters CSV, DCGM_FI_* names, units, labels and flags."""

from __future__ import annotations

import math
import re
import signal
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import httpx
import pytest

from gpu_exporter.compat.counters import CountersError, defaults, load, parse
from tests.harness import (
    ENERGY,
    REPO,
    SCENARIOS,
    Exporter,
    energy_in_range,
    samples,
    start,
    value,
)
from tests.process.test_exporter_e2e import scenario_values

FIXTURE = REPO / "tests" / "fixtures" / "default-counters.csv"
MIB = Fraction(1024 * 1024)
# Row → (scenario key, factor from the NVML unit to dcgm-exporter's unit) for every row NVML supplies.
SUPPLIED: dict[str, tuple[str, Fraction]] = {
    "DCGM_FI_DEV_SM_CLOCK": ("clock.sm", Fraction(1)),
    "DCGM_FI_DEV_MEM_CLOCK": ("clock.memory", Fraction(1)),
    "DCGM_FI_DEV_MEMORY_TEMP": ("temperature.memory", Fraction(1)),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature.gpu", Fraction(1)),
    "DCGM_FI_DEV_POWER_USAGE": ("power.usage", Fraction(1, 1000)),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy", Fraction(1)),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("pcie.replay_counter", Fraction(1)),
    "DCGM_FI_DEV_GPU_UTIL": ("utilization.gpu", Fraction(1)),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("utilization.memory", Fraction(1)),
    "DCGM_FI_DEV_ENC_UTIL": ("utilization.encoder", Fraction(1)),
    "DCGM_FI_DEV_DEC_UTIL": ("utilization.decoder", Fraction(1)),
    "DCGM_FI_DEV_FB_FREE": ("memory.free", 1 / MIB),
    "DCGM_FI_DEV_FB_USED": ("memory.used", 1 / MIB),
    "DCGM_FI_DEV_FB_RESERVED": ("memory.reserved", 1 / MIB),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": ("remapped_rows.uncorrectable", Fraction(1)),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("remapped_rows.correctable", Fraction(1)),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("remapped_rows.failure", Fraction(1)),
}
#: Rows NVML serves by a rule rather than a scenario key: DCGM 526 is 0 on h100x4's bare-metal GPUs.
RULED = {"DCGM_FI_DEV_VGPU_LICENSE_STATUS": 0.0}
#: The list's profiling fields: they turn the profiling collector on (GPM on NVML), and have no value at the
#: first read (GPM needs two samples; on h100x4 only GPU 0 has GPM).
PROFILING_FIELDS = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
}
LABEL_ORDER = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"]


#: promtool's complaints that dcgm-exporter's own names inherently cause (the documented list), by
#: family: its camelCase label modelName on every DCGM family, counters without "_total", and a
#: counter named "..._COUNTER". Nothing else may be reported.
def inherent_promtool_issues(text: str) -> set[str]:
    issues = set()
    for family, kind in re.findall(r"^# TYPE (DCGM_\w+) (\w+)$", text, re.MULTILINE):
        issues.add(f"{family} label names should be written in 'snake_case' not 'camelCase'")
        if kind == "counter":
            issues.add(f'{family} counter metrics should have "_total" suffix')
            if "COUNTER" in family:
                issues.add(f"{family} metric name should not include type 'counter'")
    return issues


def _labels_in_order(text: str, name: str) -> list[list[str]]:
    return [
        re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="', line) for line in text.splitlines() if line.startswith(name + "{")
    ]


def _compat(fakenvml_dir: Path, tmp_path: Path, scenario: Path, *args: str) -> Exporter:
    return start(
        fakenvml_dir, scenario, tmp_path, "-f", str(FIXTURE), "--collect-interval", "1h", *args,
        env={"NODE_NAME": "gpu-node-7"},
    )  # fmt: skip


def test_every_row_nvml_can_supply_appears_with_name_unit_and_labels(fakenvml_dir: Path, tmp_path: Path) -> None:
    keys = scenario_values(SCENARIOS / "h100x4.scn")
    exporter = _compat(fakenvml_dir, tmp_path, SCENARIOS / "h100x4.scn")
    try:
        text = exporter.metrics()
        content_type = exporter.get("/metrics", headers={"Accept": "application/openmetrics-text"}).headers[
            "content-type"
        ]
    finally:
        exporter.stop()
    assert content_type.startswith("text/plain; version=0.0.4")  # names without _total: text format only
    parsed = samples(text)
    for name, (key, factor) in SUPPLIED.items():
        assert f"# TYPE {name} " in text, name
        for gpu in range(4):
            expected = Fraction(keys[f"gpu{gpu}.{key}"]) * factor
            # DCGM's INT64 fields are whole numbers (framebuffer MiB = bytes // 2^20); power is a double
            expected = float(expected) if name == "DCGM_FI_DEV_POWER_USAGE" else float(math.trunc(expected))
            # (the parser files a counter's samples under NAME_total)
            sample = name + "_total" if name + "_total" in parsed else name
            got = value(parsed, sample, gpu=str(gpu), UUID=keys[f"gpu{gpu}.uuid"])
            if name in ENERGY:  # mJ, growing by the integral of power since init
                assert energy_in_range(got, expected, float(keys[f"gpu{gpu}.power.usage"])), name
                continue
            assert got == expected, f"{name} gpu{gpu}: {got} != {expected}"
        for labels in _labels_in_order(text, name):
            assert labels == LABEL_ORDER, f"{name}: {labels}"
    line = next(line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_TEMP{") and 'gpu="2"' in line)
    assert line == (
        f'DCGM_FI_DEV_GPU_TEMP{{gpu="2",UUID="{keys["gpu2.uuid"]}",pci_bus_id="00000000:58:00.0",device="nvidia2",'
        'modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-7",DCGM_FI_DRIVER_VERSION="550.54.15"} 38'
    )
    assert "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\n" in text  # help from the CSV
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n" in text  # type from the CSV
    for name, expected_value in RULED.items():
        assert [value(parsed, name, gpu=str(gpu)) for gpu in range(4)] == [expected_value] * 4, name
    assert "gpu_temperature_celsius" not in parsed  # no native device names in this mode
    xid = [dict(labels) for labels in parsed["DCGM_FI_DEV_XID_ERRORS"]]
    assert {(labels["err_code"], labels["err_msg"]) for labels in xid} == {("0", "No Error")}
    window = [dict(labels) for labels in parsed["DCGM_EXP_XID_ERRORS_COUNT"]]
    assert len(window) == 4 and all(
        labels["window_size_in_ms"] == "300000" and "xid" not in labels for labels in window
    )
    # as dcgm-exporter: only reasons seen in the window (GPU 3 starts with power_cap and hw_thermal
    # active), clock_event before window_size_in_ms
    events = {(dict(labels)["gpu"], dict(labels)["clock_event"]) for labels in parsed["DCGM_EXP_CLOCK_EVENTS_COUNT"]}
    assert events == {("3", "power_cap"), ("3", "hw_thermal")}
    # one per read with the reason active (each read so far)
    assert value(parsed, "DCGM_EXP_CLOCK_EVENTS_COUNT", gpu="3", clock_event="power_cap") >= 1
    assert _labels_in_order(text, "DCGM_EXP_CLOCK_EVENTS_COUNT")[0][-2:] == ["clock_event", "window_size_in_ms"]
    assert value(parsed, "DCGM_FI_DEV_GPU_TEMP", gpu="1", device="nvidia1") is not None  # nvidia<gpu id>
    log = exporter.log()
    assert " skipped" not in log  # the default list is served in full on NVML
    served = {row.field for row in defaults() if row.type != "label"} - PROFILING_FIELDS
    assert sorted(name for name in served if f"# TYPE {name} " not in text) == []
    for name in PROFILING_FIELDS:
        assert name not in parsed and f"{name} skipped" not in log, name  # served, but not at the first read
    assert "the counters list names profiling fields (DCGM_FI_PROF_GR_ENGINE_ACTIVE" in log


def test_profiling_fields_skipped_when_the_collector_is_switched_off(fakenvml_dir: Path, tmp_path: Path) -> None:
    exporter = _compat(fakenvml_dir, tmp_path, SCENARIOS / "h100x4.scn", "--no-collector.profiling")
    try:
        parsed = samples(exporter.metrics())
    finally:
        exporter.stop()
    log = exporter.log()
    for name in PROFILING_FIELDS:
        assert log.count(f"{name} skipped: the profiling collector is disabled") == 1, name
    assert "the counters list names profiling fields" not in log
    assert 'gpu_exporter_collector_success{collector="profiling"}' not in str(parsed)


def test_xid_in_compat_mode_has_code_message_and_window_counts(fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "xid.scn"
    scenario.write_text((SCENARIOS / "h100x4.scn").read_text() + "gpu1.xid = 79@0.5,13@0.7,13@0.9\n")
    exporter = start(fakenvml_dir, scenario, tmp_path, "-f", str(FIXTURE), "-c", "200")
    try:
        deadline = time.monotonic() + 15
        while True:
            parsed = samples(exporter.metrics())
            if value(parsed, "DCGM_EXP_XID_ERRORS_COUNT", gpu="1", xid="13") == 2:
                break
            assert time.monotonic() < deadline, exporter.metrics()
            time.sleep(0.1)
    finally:
        exporter.stop()
    assert value(parsed, "DCGM_EXP_XID_ERRORS_COUNT", gpu="1", xid="79") == 1
    assert value(parsed, "DCGM_FI_DEV_XID_ERRORS", gpu="1", err_code="13") == 13  # the last one
    message = next(dict(labels)["err_msg"] for labels in parsed["DCGM_FI_DEV_XID_ERRORS"] if dict(labels)["gpu"] == "1")
    assert message == "Graphics Engine Exception"  # dcgm-exporter's own text
    assert value(parsed, "DCGM_FI_DEV_XID_ERRORS", gpu="0", err_code="0") == 0


def test_mig_series_carry_gpu_instance_labels(fakenvml_dir: Path, tmp_path: Path) -> None:
    exporter = _compat(fakenvml_dir, tmp_path, SCENARIOS / "mig.scn", "--dcgm-exporter.hostname-label", "hostname")
    try:
        text = exporter.metrics()
    finally:
        exporter.stop()
    parsed = samples(text)
    assert value(parsed, "DCGM_FI_DEV_FB_USED", GPU_I_PROFILE="1g.5gb", GPU_I_ID="13") == 1024
    assert value(parsed, "DCGM_FI_DEV_FB_USED", GPU_I_PROFILE="3g.20gb", GPU_I_ID="1") == 8192
    mig_line = _labels_in_order(text, "DCGM_FI_DEV_FB_USED")[1]
    assert mig_line == ["gpu", "UUID", "pci_bus_id", "device", "modelName", "GPU_I_PROFILE", "GPU_I_ID", "hostname",
                        "DCGM_FI_DRIVER_VERSION"]  # fmt: skip


def test_label_values_are_escaped_and_one_failing_field_keeps_the_rest(fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "odd.scn"
    text = (
        (SCENARIOS / "h100x4.scn")
        .read_text()
        .replace("gpu0.name = NVIDIA H100 80GB HBM3", 'gpu0.name = Lab "H100" \\ rev2')
    )
    scenario.write_text(text + "gpu1.error.nvmlDeviceGetPowerUsage = UNKNOWN\n")
    exporter = _compat(fakenvml_dir, tmp_path, scenario)
    try:
        body = exporter.metrics()
    finally:
        exporter.stop()
    assert 'modelName="Lab \\"H100\\" \\\\ rev2"' in body
    parsed = samples(body)  # a strict parser accepts it
    assert value(parsed, "DCGM_FI_DEV_POWER_USAGE", gpu="1") is None
    assert value(parsed, "DCGM_FI_DEV_POWER_USAGE", gpu="2") == 98.007
    assert value(parsed, "DCGM_FI_DEV_GPU_TEMP", gpu="1") == 64


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("DCGM_FI_DEV_GPU_TEMP, gauge\n", "bad.csv:1: 'DCGM_FI_DEV_GPU_TEMP, gauge' has 2 fields"),
        ("# c\nDCGM_FI_DEV_GPU_TEMPERATURE, gauge, x\n", "bad.csv:2: unknown field 'DCGM_FI_DEV_GPU_TEMPERATURE'"),
        ("DCGM_FI_DEV_GPU_TEMP, gaug, x\n", "bad.csv:1: type 'gaug' of DCGM_FI_DEV_GPU_TEMP is not one of"),
    ],
)
def test_bad_counters_file_exits_2_naming_file_line_and_value(tmp_path: Path, content: str, needle: str) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(content)
    with pytest.raises(CountersError, match=re.escape(needle)):
        parse(content, "bad.csv")
    result = subprocess.run(
        [sys.executable, "-m", "gpu_exporter", "-f", str(bad)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and needle.replace("bad.csv", str(bad)) in result.stderr


DASHBOARD_12239 = {
    "GPU Temperature": 'DCGM_FI_DEV_GPU_TEMP{instance=~".*", gpu=~".*"}',
    "GPU Avg. Temp": 'avg(DCGM_FI_DEV_GPU_TEMP{instance=~".*", gpu=~".*"})',
    "GPU Power Usage": 'DCGM_FI_DEV_POWER_USAGE{instance=~".*", gpu=~".*"}',
    "GPU Power Total": 'sum(DCGM_FI_DEV_POWER_USAGE{instance=~".*", gpu=~".*"})',
    "GPU SM Clocks": 'DCGM_FI_DEV_SM_CLOCK{instance=~".*", gpu=~".*"} * 1000000',
    "GPU Utilization": 'DCGM_FI_DEV_GPU_UTIL{instance=~".*", gpu=~".*"}',
    "GPU Framebuffer Mem Used": 'DCGM_FI_DEV_FB_USED{instance=~".*", gpu=~".*"}',
    "Tensor Core Utilization": 'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{instance=~".*", gpu=~".*"}',
}


def _query(port: int, promql: str) -> list[dict[str, object]]:
    response = httpx.get(f"http://127.0.0.1:{port}/api/v1/query", params={"query": promql}, timeout=10)
    response.raise_for_status()
    result: list[dict[str, object]] = response.json()["data"]["result"]
    return result


# --- dcgm-exporter drop-in: its probe path, flags, variables, field names, MIG shape, Xid texts ---

OLD_FIXTURE = REPO / "tests" / "fixtures" / "1.x-names.csv"
EVERY_KIND = REPO / "tests" / "fixtures" / "every-kind.csv"


def test_health_answers_as_dcgm_exporter(fakenvml_dir: Path, tmp_path: Path) -> None:
    exporter = _compat(fakenvml_dir, tmp_path, SCENARIOS / "h100x4.scn")
    try:
        answer = exporter.get("/health")
        native = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, wait_for="/health")
        try:
            assert native.get("/health").status_code == 200  # in native mode too (NVIDIA's chart probes it)
        finally:
            native.stop()
    finally:
        exporter.stop()
    assert (answer.status_code, answer.text) == (200, "OK")
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["x-registry-available"] == "true"  # as dcgm-exporter's


def test_dcgm_exporter_variables_out_of_process(fakenvml_dir: Path, tmp_path: Path) -> None:
    env = {
        "NODE_NAME": "gpu-node-7",
        "DCGM_EXPORTER_NO_HOSTNAME": "true",
        "DCGM_EXPORTER_USE_OLD_NAMESPACE": "true",
        "DCGM_EXPORTER_DEVICES_STR": "g:0,2-3",
        "DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE": "60000",
        "DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME": "true",
        "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS": "true",
        "DCGM_EXPORTER_CONFIGMAP_DATA": "none",
        "DCGM_EXPORTER_DUMP_ENABLED": "true",
        "DCGM_EXPORTER_COLLECTORS": str(FIXTURE),
    }
    exporter = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "--collect-interval", "1h", env=env)
    try:
        text = exporter.metrics()
    finally:
        exporter.stop()
    parsed = samples(text)
    assert "Hostname" not in text and "gpu-node-7" not in text  # -n
    assert _labels_in_order(text, "DCGM_FI_DEV_GPU_TEMP")[0][:5] == ["gpu", "uuid", "pci_bus_id", "device", "modelName"]
    assert {dict(labels)["gpu"] for labels in parsed["DCGM_FI_DEV_GPU_TEMP"]} == {"0", "2", "3"}  # -d g:0,2-3
    assert 'modelName="NVIDIA-H100-80GB-HBM3"' in text
    assert {dict(labels)["window_size_in_ms"] for labels in parsed["DCGM_EXP_XID_ERRORS_COUNT"]} == {"60000"}
    log = exporter.log()
    for needle in ("--kubernetes-enable-pod-labels", "--dump-enabled"):
        assert log.count(needle) == 1, needle  # one warning each, naming why


def test_dcgm_exporter_flags_out_of_process(fakenvml_dir: Path, tmp_path: Path) -> None:
    exporter = start(
        fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "-f", str(FIXTURE), "--collect-interval", "1h",
        "-n", "-o", "-d", "g", "-x", "120000", "--clock-events-count-window-size", "90000",
        "--kubernetes-gpu-id-type", "device-name", "--web-write-timeout", "30s", "--enable-dcgm-log",
        "--disable-startup-validate", "--fake-gpus", "-s", "f", "-p", "f",
    )  # fmt: skip
    try:
        text = exporter.metrics()
    finally:
        exporter.stop()
    parsed = samples(text)
    assert "Hostname" not in text and 'uuid="GPU-' in text
    assert {dict(labels)["window_size_in_ms"] for labels in parsed["DCGM_EXP_XID_ERRORS_COUNT"]} == {"120000"}
    assert {dict(labels)["window_size_in_ms"] for labels in parsed["DCGM_EXP_CLOCK_EVENTS_COUNT"]} == {"90000"}
    log = exporter.log()
    for needle in ("--web-write-timeout", "--enable-dcgm-log", "--fake-gpus"):
        assert log.count(needle) == 1, needle
    assert "--switch-devices" not in log and "--cpu-devices" not in log  # their defaults: nothing to warn


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["-d", "x"], "--devices='x' is not allowed: use f, g[:ids]"),
        (["-d", "f+g"], "--devices='f+g' is not allowed"),
        (["-x", "0"], "--xid-count-window-size='0' is not allowed"),
        (["--clock-events-count-window-size", "7200000"], "is not allowed: use a number of milliseconds"),
        (["-m", "nocolon"], "--configmap-data='nocolon' is not allowed: use NAMESPACE:NAME"),
        (["--kubernetes-gpu-id-type", "serial"], "one of uid, device-name"),
        (["-n", "maybe"], "--no-hostname='maybe' is not allowed: use true or false"),
    ],
)
def test_bad_dcgm_exporter_flag_values_exit_2(args: list[str], needle: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gpu_exporter", *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and needle in result.stderr


def test_version_flag_as_dcgm_exporter_spells_it() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gpu_exporter", "-v"], capture_output=True, text=True, timeout=60, check=False
    )
    assert (result.returncode, result.stdout.split()[0]) == (0, "gpu-exporter")


# dcgm-exporter 4.x's --help, written down by the team: (its spellings, its variable).
DCGM_EXPORTER_4X_FLAGS = (
    ("--collectors -f", "DCGM_EXPORTER_COLLECTORS"), ("--address -a", "DCGM_EXPORTER_LISTEN"),
    ("--collect-interval -c", "DCGM_EXPORTER_INTERVAL"), ("--kubernetes -k", "DCGM_EXPORTER_KUBERNETES"),
    ("--use-old-namespace -o", "DCGM_EXPORTER_USE_OLD_NAMESPACE"),
    ("--cpu-devices -p", "DCGM_EXPORTER_CPU_DEVICES_STR"), ("--configmap-data -m", "DCGM_EXPORTER_CONFIGMAP_DATA"),
    ("--remote-hostengine-info -r", "DCGM_REMOTE_HOSTENGINE_INFO"),
    ("--kubernetes-enable-pod-labels", "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS"),
    ("--kubernetes-enable-pod-uid", "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID"),
    ("--kubernetes-gpu-id-type", "DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE"),
    ("--kubernetes-pod-label-allowlist-regex", "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX"),
    ("--devices -d", "DCGM_EXPORTER_DEVICES_STR"), ("--no-hostname -n", "DCGM_EXPORTER_NO_HOSTNAME"),
    ("--switch-devices -s", "DCGM_EXPORTER_OTHER_DEVICES_STR"), ("--fake-gpus", "DCGM_EXPORTER_USE_FAKE_GPUS"),
    ("--web-config-file", "DCGM_EXPORTER_WEB_CONFIG_FILE"),
    ("--xid-count-window-size -x", "DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE"),
    ("--replace-blanks-in-model-name --rbmn", "DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME"),
    ("--debug", "DCGM_EXPORTER_DEBUG"),
    ("--clock-events-count-window-size", "DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE"),
    ("--enable-dcgm-log", "DCGM_EXPORTER_ENABLE_DCGM_LOG"), ("--dcgm-log-level", "DCGM_EXPORTER_DCGM_LOG_LEVEL"),
    ("--log-format", "DCGM_EXPORTER_LOG_FORMAT"),
    ("--pod-resources-kubelet-socket", "DCGM_POD_RESOURCES_KUBELET_SOCKET"),
    ("--hpc-job-mapping-dir", "DCGM_HPC_JOB_MAPPING_DIR"), ("--nvidia-resource-names", "NVIDIA_RESOURCE_NAMES"),
    ("--kubernetes-virtual-gpus", "KUBERNETES_VIRTUAL_GPUS"), ("--dump-enabled", "DCGM_EXPORTER_DUMP_ENABLED"),
    ("--dump-directory", "DCGM_EXPORTER_DUMP_DIRECTORY"), ("--dump-retention", "DCGM_EXPORTER_DUMP_RETENTION"),
    ("--dump-compression", "DCGM_EXPORTER_DUMP_COMPRESSION"), ("--kubernetes-enable-dra", "KUBERNETES_ENABLE_DRA"),
    ("--disable-startup-validate", "DISABLE_STARTUP_VALIDATE"),
    ("--enable-gpu-bind-unbind-watch", "DCGM_EXPORTER_ENABLE_GPU_BIND_UNBIND_WATCH"),
    ("--gpu-bind-unbind-poll-interval", "DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL"),
    ("--enable-pprof", "DCGM_EXPORTER_ENABLE_PPROF"), ("--web-systemd-socket", "DCGM_EXPORTER_SYSTEMD_SOCKET"),
)  # fmt: skip


def test_every_warning_flag_out_of_process(fakenvml_dir: Path, tmp_path: Path) -> None:
    """One exporter given every dcgm-exporter setting that cannot apply here, as the chart would (its
    variables), serves as usual and logs one warning naming each."""
    from gpu_exporter.compat.flags import FLAGS

    inert = [flag for flag in FLAGS if flag.warn and not flag.option and not flag.setting]
    inert = [flag for flag in inert if not flag.names[0].startswith("--kubernetes-")]  # attribution: its own tests
    inert = [flag for flag in inert if flag.default != "true"]  # on by default (dump compression): false is no news
    samples_by_kind = {"parse_devices": "g", "_bool": "true"}
    env = {
        flag.env: samples_by_kind.get(flag.parse.__name__, "48" if "retention" in flag.env else "x") for flag in inert
    }
    exporter = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "--collect-interval", "1h", env=env)
    try:
        assert "gpu_temperature_celsius" in exporter.metrics()
        log = exporter.log()
    finally:
        exporter.stop()
    assert len(inert) >= 12
    for flag in inert:
        assert log.count(flag.warn.split("'")[0]) == 1, flag.names[0]  # (the log escapes quotes)


def build_parser_options() -> set[str]:
    from gpu_exporter.cli import build_parser

    return {string for action in build_parser()._actions for string in action.option_strings}


def test_1x_names_with_old_namespace(fakenvml_dir: Path, tmp_path: Path) -> None:
    keys = scenario_values(SCENARIOS / "h100x4.scn")
    exporter = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "-f", str(OLD_FIXTURE), "-o",
                     "--collect-interval", "1h")  # fmt: skip
    try:
        text = exporter.metrics()
    finally:
        exporter.stop()
    parsed = samples(text)
    assert "# TYPE dcgm_sm_clock gauge" in text  # the name as written is the metric name
    uuid = keys["gpu1.uuid"]
    assert value(parsed, "dcgm_gpu_temp", gpu="1", uuid=uuid) == float(keys["gpu1.temperature.gpu"])
    assert value(parsed, "dcgm_fb_used", gpu="1") == math.trunc(Fraction(keys["gpu1.memory.used"]) / MIB)
    assert value(parsed, "dcgm_xid_errors", gpu="1", err_msg="No Error") == 0
    assert "DCGM_FI_" not in text and "UUID=" not in text
    # the list names a profiling field: the collector is on (GPM; no value at the first read)
    assert "dcgm_fi_prof_sm_active skipped" not in exporter.log()
    assert "the counters list names profiling fields (dcgm_fi_prof_sm_active)" in exporter.log()


def test_every_field_kind_renamed_and_unsuppliable_names(fakenvml_dir: Path, tmp_path: Path) -> None:
    exporter = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "-f", str(EVERY_KIND), "--collect-interval",
                     "1h")  # fmt: skip
    try:
        text = exporter.metrics()
    finally:
        exporter.stop()
    parsed = samples(text)
    assert value(parsed, "DCGM_FI_DEV_GPU_TEMP", gpu="0", DCGM_FI_DEV_GPU_NAME="NVIDIA H100 80GB HBM3") is not None
    assert "# TYPE DCGM_FI_DEV_SM_CLOCK histogram" in text and "# TYPE DCGM_FI_DEV_MEM_CLOCK summary" in text
    assert "DCGM_EXP_XID_ERRORS_COUNT{" in text
    log = exporter.log()
    assert "DCGM_FI_DEV_FB_USED_PERCENT{" in text  # DCGM's name for field 254, served under it
    for name in ("DCGM_FI_SYNC_BOOST",):  # a real field, not supplied (a DCGM configuration)
        assert log.count(f"{name} skipped") == 1, name
        assert f"{name}{{" not in text
    assert value(parsed, "DCGM_FI_DEV_GPU_TEMP_LIMIT", gpu="0") == 19  # the thermal margin, field 153
    # label fields sorted by name after Hostname
    assert _labels_in_order(text, "DCGM_FI_DEV_GPU_TEMP")[0][-2:] == ["DCGM_FI_DEV_GPU_NAME", "DCGM_FI_DRIVER_VERSION"]


def test_mig_gpu_reports_instances_only_and_sums_right(fakenvml_dir: Path, tmp_path: Path) -> None:
    keys = scenario_values(SCENARIOS / "mig.scn")
    shapes = {}
    logs = {}
    for devices in ("f", "g+i", "g", "i", "i:1,9"):
        exporter = _compat(fakenvml_dir, tmp_path, SCENARIOS / "mig.scn", "-d", devices)
        try:
            shapes[devices] = samples(exporter.metrics())
            logs[devices] = exporter.log()
        finally:
            exporter.stop()
    flex = shapes["f"]
    used = [v for labels, v in flex["DCGM_FI_DEV_FB_USED"].items()]
    assert all("GPU_I_ID" in dict(labels) for labels in flex["DCGM_FI_DEV_FB_USED"])  # no whole-GPU series
    assert sum(used) == sum(math.trunc(Fraction(keys[f"gpu0.mig.{n}.memory.used"]) / MIB) for n in range(3))
    temps = {dict(labels)["GPU_I_ID"]: v for labels, v in flex["DCGM_FI_DEV_GPU_TEMP"].items()}
    assert temps == dict.fromkeys(("1", "5", "13"), float(keys["gpu0.temperature.gpu"]))  # the GPU's, per instance
    assert len(shapes["g+i"]["DCGM_FI_DEV_FB_USED"]) == 4  # the whole GPU and its three instances
    assert [dict(labels).get("GPU_I_ID") for labels in shapes["g"]["DCGM_FI_DEV_FB_USED"]] == [None]
    assert sorted(dict(labels)["GPU_I_ID"] for labels in shapes["i"]["DCGM_FI_DEV_GPU_TEMP"]) == ["1", "13", "5"]
    # i:IDS are DCGM's GPU-instance entity ids (GPU 0's second instance is 1), not GPU_I_ID values
    assert [dict(labels)["GPU_I_ID"] for labels in shapes["i:1,9"]["DCGM_FI_DEV_FB_USED"]] == ["5"]
    assert logs["i:1,9"].count("-d: GPU instance 9 is not on this host") == 1  # dcgm-exporter would not start
    assert "is not on this host" not in logs["i"]
    assert sum(shapes["i"]["DCGM_FI_DEV_FB_USED"].values()) == sum(used)


class _ApiServer:
    """A real HTTPS stand-in for the Kubernetes API server answering one ConfigMap."""

    def __init__(self, certs_dir: Path, configmaps: dict[str, object]) -> None:
        import json
        import ssl
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        from tests.webtls import make_certs

        self.certs = make_certs(certs_dir)
        self.seen: list[tuple[str, str]] = []
        seen = self.seen

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # http.server's name
                seen.append((self.path, self.headers.get("Authorization", "")))
                found = configmaps.get(self.path)
                body = json.dumps(found if found is not None else {"kind": "Status", "code": 404}).encode()
                self.send_response(200 if found is not None else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(self.certs.path("server.crt")), str(self.certs.path("server.key")))
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def env(self) -> dict[str, str]:
        return {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(self.server.server_port)}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("scenario", ["h100x4.scn", "mig.scn"])
def test_nvml_and_dcgm_give_byte_identical_compat_output(fakenvml_dir: Path, tmp_path: Path, scenario: str) -> None:
    """Parity in dcgm-exporter mode: the same host state through NVML (the real process) and DCGM
    (DcgmBackend on tests/dcgmfake.py, the real Sampler) renders the same DCGM_* lines, byte for
    byte: whole MiB on both, the same labels and order, the same values."""
    from gpu_exporter.assemble import bare_sampler
    from gpu_exporter.backends.dcgm import DcgmBackend
    from gpu_exporter.catalogue import DEFAULT_COLLECTORS, enabled_specs
    from gpu_exporter.compat.plan import needed_collectors, plan
    from tests.dcgmfake import from_scenario

    text = (SCENARIOS / scenario).read_text()
    exporter = _compat(fakenvml_dir, tmp_path, SCENARIOS / scenario, "--backend", "nvml")
    try:
        nvml = exporter.metrics()
    finally:
        exporter.stop()
    specs = enabled_specs(DEFAULT_COLLECTORS | needed_collectors(load(str(FIXTURE)), "dcgm"))  # as the app does
    compat_plan = plan(load(str(FIXTURE)), specs, "dcgm", True, "gpu-node-7", "Hostname")
    fake = from_scenario(text)
    sampler = bare_sampler(DcgmBackend(lambda: fake, specs, 3600.0), specs, 3600.0, "parity", watch_events=True,
                      compat=compat_plan)  # fmt: skip
    try:
        dcgm = sampler.run_cycle().rendered.text.decode()
    finally:
        sampler.stop()

    def dcgm_lines(exposition: str) -> list[str]:
        # families both backends supply (DCGM also has the profiling rows NVML skips; NVML serves 449,
        # NVLINK_BANDWIDTH_TOTAL, which the DCGM backend does not watch: compat_fields' docstring)
        skipped = ("DCGM_FI_PROF_", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", *ENERGY)  # energy: grows on the fake
        return [line for line in exposition.splitlines() if "DCGM_" in line and not any(s in line for s in skipped)]

    assert dcgm_lines(nvml) == dcgm_lines(dcgm)
    assert any(line.startswith("DCGM_FI_DEV_FB_USED{") for line in dcgm_lines(nvml))


def test_reload_keeps_the_profiling_collector_the_counters_list_turned_on(fakenvml_dir: Path, tmp_path: Path) -> None:
    exporter = _compat(fakenvml_dir, tmp_path, SCENARIOS / "h100x4.scn")
    try:
        exporter.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 20
        while "reload done" not in exporter.log() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        exporter.stop()
    log = exporter.log()
    assert "reload done" in log and "need a restart" not in log, log
