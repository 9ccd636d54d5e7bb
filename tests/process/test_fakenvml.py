"""The fake libnvidia-ml.so.1 driven by the unmodified nvidia-ml-py, each case in a fresh process.

The loader reads LD_LIBRARY_PATH only at process start, so every case runs ``python -c`` with the
fake on that path, a scenario file and a trace file, and prints one JSON document as its last line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fakenvml.build import LIB_NAME
from tests.harness import REPO

# Helpers available to every snippet. ``field`` raises like a getter, so a missing key reads the
# same through nvmlDeviceGetFieldValues as through any other call.
PRELUDE = """
import ctypes, json, os, sys, threading, time
import pynvml as nvml

def err(fn, *args):
    try:
        fn(*args)
    except nvml.NVMLError as exc:
        return type(exc).__name__
    return None

def emit(value):
    print(json.dumps(value))

def rewrite(text):
    path = os.environ["FAKE_NVML_SCENARIO"]
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)

def scenario():
    with open(os.environ["FAKE_NVML_SCENARIO"]) as f:
        return f.read()

def field(h, fid, scope=0):
    v = nvml.nvmlDeviceGetFieldValues(h, [(fid, scope)])[0]
    if v.nvmlReturn != nvml.NVML_SUCCESS:
        raise nvml.NVMLError(v.nvmlReturn)
    return v.value.uiVal if v.valueType == nvml.NVML_VALUE_TYPE_UNSIGNED_INT else v.value.ullVal
"""


@dataclass
class Run:
    """What a snippet printed (parsed), wrote to stderr, and the fake's trace lines."""

    value: Any
    stderr: str
    trace: list[str]


class Pynvml:
    """Runs snippets under pynvml in a subprocess, against the fake and a scenario file."""

    def __init__(self, lib_dir: Path, tmp_path: Path) -> None:
        self.lib_dir = lib_dir
        self.scenario = tmp_path / "scenario.txt"
        self.trace = tmp_path / "trace.txt"

    def __call__(self, scenario: str, body: str, *, init: bool = True) -> Run:
        self.scenario.write_text(textwrap.dedent(scenario))
        self.trace.unlink(missing_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVML_")}
        env |= {
            "LD_LIBRARY_PATH": str(self.lib_dir),
            "FAKE_NVML_SCENARIO": str(self.scenario),
            "FAKE_NVML_TRACE": str(self.trace),
        }
        code = PRELUDE + ("nvml.nvmlInit()\n" if init else "") + textwrap.dedent(body)
        proc = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30, check=False
        )
        assert proc.returncode == 0, proc.stderr
        trace = self.trace.read_text().splitlines() if self.trace.exists() else []
        return Run(json.loads(proc.stdout.splitlines()[-1]), proc.stderr, trace)


@pytest.fixture
def pynvml_run(fakenvml_dir: Path, tmp_path: Path) -> Pynvml:
    return Pynvml(fakenvml_dir, tmp_path)


def test_build_command_prints_absolute_dir_and_skips_when_up_to_date(tmp_path: Path) -> None:
    def build() -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "tests.fakenvml.build", "out"],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            check=True,
        )
        return proc.stdout.splitlines()[-1]

    assert build() == str(tmp_path / "out")
    lib = tmp_path / "out" / LIB_NAME
    data = lib.read_bytes()
    assert data[:4] == b"\x7fELF" and b"libnvidia-ml.so.1\0" in data
    built = lib.stat().st_mtime_ns
    assert build() == str(tmp_path / "out")
    assert lib.stat().st_mtime_ns == built


def test_identity_strings_defaults_and_lookups(pynvml_run: Pynvml) -> None:
    run = pynvml_run(
        """
        # host
        driver_version = 550.54.15
        nvml_version = 12.550.54.15
        cuda_driver_version = 12040
        unknown.key = ignored
        this line has no equals sign
        gpu0.name = NVIDIA H100 80GB HBM3   # trailing comment
        gpu0.uuid = GPU-6e4a1c53-1111-2222-3333-444455556666
        gpu0.serial = 1653220012345
        gpu0.vbios_version = 96.00.74.00.0D
        gpu0.board_part_number = 692-2G520-0200-000
        gpu0.pci_bus_id = 00000000:17:00.0
        gpu0.minor_number = 5
        gpu1.name = NVIDIA A100-SXM4-40GB
        gpu1.name = NVIDIA A100-SXM4-80GB
        """,
        """
        h0, h1 = (nvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
        p0, p1 = nvml.nvmlDeviceGetPciInfo(h0), nvml.nvmlDeviceGetPciInfo(h1)
        emit({
            "count": nvml.nvmlDeviceGetCount(),
            "host": [nvml.nvmlSystemGetDriverVersion(), nvml.nvmlSystemGetNVMLVersion(),
                     nvml.nvmlSystemGetCudaDriverVersion(), nvml.nvmlSystemGetCudaDriverVersion_v2()],
            "names": [nvml.nvmlDeviceGetName(h0), nvml.nvmlDeviceGetName(h1)],
            "uuids": [nvml.nvmlDeviceGetUUID(h0), nvml.nvmlDeviceGetUUID(h1)],
            "strings": [nvml.nvmlDeviceGetSerial(h0), nvml.nvmlDeviceGetVbiosVersion(h0),
                        nvml.nvmlDeviceGetBoardPartNumber(h0)],
            "missing": [err(nvml.nvmlDeviceGetSerial, h1), err(nvml.nvmlDeviceGetVbiosVersion, h1),
                        err(nvml.nvmlDeviceGetBoardPartNumber, h1)],
            "pci": [p0.busId, p0.busIdLegacy, p0.domain, p0.bus, p0.device, p0.pciDeviceId, p1.busId, p1.bus],
            "minor": [nvml.nvmlDeviceGetMinorNumber(h0), nvml.nvmlDeviceGetMinorNumber(h1)],
            "index": [nvml.nvmlDeviceGetIndex(h0), nvml.nvmlDeviceGetIndex(h1)],
            "by_uuid": nvml.nvmlDeviceGetIndex(nvml.nvmlDeviceGetHandleByUUID(nvml.nvmlDeviceGetUUID(h1))),
            "by_bus": [nvml.nvmlDeviceGetIndex(nvml.nvmlDeviceGetHandleByPciBusId(b))
                       for b in ("00000000:17:00.0", "0000:17:00.0", "00000000:01:00.0")],
            "not_found": [err(nvml.nvmlDeviceGetHandleByUUID, "GPU-nope"),
                          err(nvml.nvmlDeviceGetHandleByPciBusId, "0000:99:00.0")],
            "bad_index": err(nvml.nvmlDeviceGetHandleByIndex, 2),
            "error_strings": [nvml.nvmlErrorString(c) for c in (3, 9, 15, 999)],
        })
        """,
    )
    v = run.value
    assert v["count"] == 2
    assert v["host"] == ["550.54.15", "12.550.54.15", 12040, 12040]
    assert v["names"] == ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"]  # last line wins
    assert v["uuids"] == ["GPU-6e4a1c53-1111-2222-3333-444455556666", "GPU-00000000-0000-0000-0000-000000000001"]
    assert v["strings"] == ["1653220012345", "96.00.74.00.0D", "692-2G520-0200-000"]
    assert v["missing"] == ["NVMLError_NotSupported"] * 3
    assert v["pci"] == ["00000000:17:00.0", "0000:17:00.0", 0, 0x17, 0, 0x233010DE, "00000000:01:00.0", 1]
    assert v["minor"] == [5, 1]
    assert v["index"] == [0, 1]
    assert v["by_uuid"] == 1
    assert v["by_bus"] == [0, 0, 1]
    assert v["not_found"] == ["NVMLError_NotFound"] * 2
    assert v["bad_index"] == "NVMLError_InvalidArgument"
    assert v["error_strings"] == ["Not Supported", "Driver Not Loaded", "GPU is lost", "Unknown Error"]
    assert "no '=' in" in run.stderr


def test_host_defaults(pynvml_run: Pynvml) -> None:
    run = pynvml_run(
        "gpu0.name = x\n",
        """
        emit([nvml.nvmlSystemGetDriverVersion(), nvml.nvmlSystemGetNVMLVersion(),
              nvml.nvmlSystemGetCudaDriverVersion()])
        """,
    )
    assert run.value == ["999.99", "13.999.99", 13000]


def test_memory_v1_includes_reserved_and_v2_does_not(pynvml_run: Pynvml) -> None:
    run = pynvml_run(
        """
        gpu0.memory.total = 1000
        gpu0.memory.used = 300
        gpu0.memory.reserved = 50
        gpu1.memory.total = 1000
        gpu1.memory.used = 300
        gpu1.memory.free = 600
        """,
        """
        out = []
        for i in range(2):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            m1 = nvml.nvmlDeviceGetMemoryInfo(h)
            m2 = nvml.nvmlDeviceGetMemoryInfo(h, version=nvml.nvmlMemory_v2)
            out.append([[m1.total, m1.used, m1.free], [m2.total, m2.reserved, m2.used, m2.free]])
        wrong = nvml.c_nvmlMemory_v2_t()
        wrong.version = 1
        fn = nvml._nvmlGetFunctionPointer("nvmlDeviceGetMemoryInfo_v2")
        out.append(fn(nvml.nvmlDeviceGetHandleByIndex(0), ctypes.byref(wrong)))
        emit(out)
        """,
    )
    assert run.value == [
        [[1000, 350, 650], [1000, 50, 300, 650]],
        [[1000, 300, 600], [1000, 0, 300, 600]],
        25,  # NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    ]


# (scenario lines for gpu0, expression over handle h, expected value). gpu1 has none of these keys,
# so every expression must raise NVMLError_NotSupported there.
# fmt: off
NUMERIC_CASES: list[tuple[str, str, Any]] = [
    ("bar1.total = 4096\nbar1.used = 1024",
     "(lambda m: [m.bar1Total, m.bar1Used, m.bar1Free])(nvml.nvmlDeviceGetBAR1MemoryInfo(h))", [4096, 1024, 3072]),
    ("utilization.gpu = 87\nutilization.memory = 33",
     "(lambda u: [u.gpu, u.memory])(nvml.nvmlDeviceGetUtilizationRates(h))", [87, 33]),
    ("utilization.encoder = 12", "nvml.nvmlDeviceGetEncoderUtilization(h)", [12, 167000]),
    ("utilization.decoder = 7", "nvml.nvmlDeviceGetDecoderUtilization(h)", [7, 167000]),
    ("temperature.gpu = 61", "nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)", 61),
    ("", "nvml.nvmlDeviceGetTemperatureV(h, nvml.NVML_TEMPERATURE_GPU)", 61),
    ("temperature.memory = 70", "field(h, nvml.NVML_FI_DEV_MEMORY_TEMP)", 70),
    ("temperature.slowdown = 87",
     "nvml.nvmlDeviceGetTemperatureThreshold(h, nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)", 87),
    ("temperature.shutdown = 92",
     "nvml.nvmlDeviceGetTemperatureThreshold(h, nvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN)", 92),
    ("temperature.max_operating = 85",
     "nvml.nvmlDeviceGetTemperatureThreshold(h, nvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX)", 85),
    ("temperature.margin = -3", "nvml.nvmlDeviceGetMarginTemperature(h)", -3),  # signed: past the limit
    ("fan_speed = 30", "nvml.nvmlDeviceGetFanSpeed(h)", 30),
    ("", "nvml.nvmlDeviceGetFanSpeed_v2(h, 0)", 30),
    ("", "nvml.nvmlDeviceGetNumFans(h)", 1),
    ("power.usage = 312000", "nvml.nvmlDeviceGetPowerUsage(h)", 312000),
    ("power.limit = 700000", "nvml.nvmlDeviceGetPowerManagementLimit(h)", 700000),
    ("", "field(h, nvml.NVML_FI_DEV_POWER_REQUESTED_LIMIT)", 700000),
    ("app_clock.sm = 1755\napp_clock.memory = 2619",
     "[nvml.nvmlDeviceGetApplicationsClock(h, nvml.NVML_CLOCK_SM), "
     "nvml.nvmlDeviceGetApplicationsClock(h, nvml.NVML_CLOCK_MEM)]", [1755, 2619]),
    ("virtualization_mode = 1", "nvml.nvmlDeviceGetVirtualizationMode(h)", 1),
    ("ecc.mode = 0\necc.pending = 1", "nvml.nvmlDeviceGetEccMode(h)", [1, 1]),  # ecc.mode = 1 below wins
    ("", "field(h, nvml.NVML_FI_DEV_ECC_PENDING)", 1),
    ("nvlink.1.state = 1\nnvlink.1.crc_flit_errors = 4",
     "[nvml.nvmlDeviceGetNvLinkErrorCounter(h, 1, nvml.NVML_NVLINK_ERROR_DL_CRC_FLIT), "
     "field(h, nvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L1), "
     "field(h, nvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL)]", [4, 4, 4]),
    ("power.default_limit = 650000", "nvml.nvmlDeviceGetPowerManagementDefaultLimit(h)", 650000),
    ("power.enforced_limit = 600000", "nvml.nvmlDeviceGetEnforcedPowerLimit(h)", 600000),
    ("power.min_limit = 200000\npower.max_limit = 700000",
     "nvml.nvmlDeviceGetPowerManagementLimitConstraints(h)", [200000, 700000]),
    ("clock.sm = 1980", "nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)", 1980),
    ("clock.memory = 2619", "nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM)", 2619),
    ("clock.graphics = 1975", "nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_GRAPHICS)", 1975),
    ("clock.video = 1545", "nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_VIDEO)", 1545),
    ("", "nvml.nvmlDeviceGetClock(h, nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_ID_CURRENT)", 1980),
    ("max_clock.sm = 1981", "nvml.nvmlDeviceGetMaxClockInfo(h, nvml.NVML_CLOCK_SM)", 1981),
    ("max_clock.memory = 2620", "nvml.nvmlDeviceGetMaxClockInfo(h, nvml.NVML_CLOCK_MEM)", 2620),
    ("max_clock.graphics = 1976", "nvml.nvmlDeviceGetMaxClockInfo(h, nvml.NVML_CLOCK_GRAPHICS)", 1976),
    ("max_clock.video = 1546", "nvml.nvmlDeviceGetMaxClockInfo(h, nvml.NVML_CLOCK_VIDEO)", 1546),
    ("pstate = 2", "nvml.nvmlDeviceGetPerformanceState(h)", 2),
    ("clock_event_reasons = 68", "nvml.nvmlDeviceGetCurrentClocksEventReasons(h)", 68),
    ("violation.power = 1001", "nvml.nvmlDeviceGetViolationStatus(h, nvml.NVML_PERF_POLICY_POWER).violationTime",
     1001),
    ("violation.thermal = 1002",
     "nvml.nvmlDeviceGetViolationStatus(h, nvml.NVML_PERF_POLICY_THERMAL).violationTime", 1002),
    ("violation.sync_boost = 1003",
     "nvml.nvmlDeviceGetViolationStatus(h, nvml.NVML_PERF_POLICY_SYNC_BOOST).violationTime", 1003),
    ("violation.board_limit = 1004",
     "nvml.nvmlDeviceGetViolationStatus(h, nvml.NVML_PERF_POLICY_BOARD_LIMIT).violationTime", 1004),
    ("violation.low_util = 1005",
     "nvml.nvmlDeviceGetViolationStatus(h, nvml.NVML_PERF_POLICY_LOW_UTILIZATION).violationTime", 1005),
    ("violation.reliability = 1006",
     "nvml.nvmlDeviceGetViolationStatus(h, nvml.NVML_PERF_POLICY_RELIABILITY).violationTime", 1006),
    ("pcie.tx = 1024", "nvml.nvmlDeviceGetPcieThroughput(h, nvml.NVML_PCIE_UTIL_TX_BYTES)", 1024),
    ("pcie.rx = 2048", "nvml.nvmlDeviceGetPcieThroughput(h, nvml.NVML_PCIE_UTIL_RX_BYTES)", 2048),
    ("pcie.link_gen = 4", "nvml.nvmlDeviceGetCurrPcieLinkGeneration(h)", 4),
    ("pcie.max_link_gen = 5", "nvml.nvmlDeviceGetMaxPcieLinkGeneration(h)", 5),
    ("", "nvml.nvmlDeviceGetGpuMaxPcieLinkGeneration(h)", 5),
    ("pcie.link_width = 8", "nvml.nvmlDeviceGetCurrPcieLinkWidth(h)", 8),
    ("pcie.max_link_width = 16", "nvml.nvmlDeviceGetMaxPcieLinkWidth(h)", 16),
    ("pcie.replay_counter = 3", "nvml.nvmlDeviceGetPcieReplayCounter(h)", 3),
    ("", "field(h, nvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER)", 3),
    ("ecc.mode = 1", "nvml.nvmlDeviceGetEccMode(h)", [1, 1]),
    ("ecc.volatile.corrected = 11",
     "nvml.nvmlDeviceGetTotalEccErrors(h, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_VOLATILE_ECC)", 11),
    ("ecc.volatile.uncorrected = 12",
     "nvml.nvmlDeviceGetTotalEccErrors(h, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC)", 12),
    ("ecc.aggregate.corrected = 13",
     "nvml.nvmlDeviceGetTotalEccErrors(h, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_AGGREGATE_ECC)", 13),
    ("ecc.aggregate.uncorrected = 14",
     "nvml.nvmlDeviceGetTotalEccErrors(h, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_AGGREGATE_ECC)", 14),
    ("remapped_rows.correctable = 2\nremapped_rows.uncorrectable = 1\nremapped_rows.pending = 1\n"
     "remapped_rows.failure = 0", "nvml.nvmlDeviceGetRemappedRows(h)", [2, 1, 1, 0]),
    ("ecc.aggregate.uncorrected.sram = 15",
     "nvml.nvmlDeviceGetMemoryErrorCounter(h, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_AGGREGATE_ECC, "
     "nvml.NVML_MEMORY_LOCATION_SRAM)", 15),
    ("ecc.volatile.corrected.device_memory = 16",
     "[nvml.nvmlDeviceGetMemoryErrorCounter(h, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_VOLATILE_ECC, "
     "nvml.NVML_MEMORY_LOCATION_DEVICE_MEMORY), field(h, nvml.NVML_FI_DEV_ECC_SBE_VOL_DEV)]", [16, 16]),
    ("ecc.aggregate.uncorrected.cbu = 17", "field(h, nvml.NVML_FI_DEV_ECC_DBE_AGG_CBU)", 17),
    ("row_remapper.max = 2559\nrow_remapper.high = 1\nrow_remapper.partial = 0\nrow_remapper.low = 0\n"
     "row_remapper.none = 0",
     "(lambda v: [v.max, v.high, v.partial, v.low, v.none])(nvml.nvmlDeviceGetRowRemapperHistogram(h))",
     [2559, 1, 0, 0, 0]),
    ("inforom.checksum = 77", "nvml.nvmlDeviceGetInforomConfigurationChecksum(h)", 77),
    ("inforom.valid = 1", "nvml.nvmlDeviceValidateInforom(h)", None),
    ("retired_pages.single_bit = 2",
     "len(nvml.nvmlDeviceGetRetiredPages(h, nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS))", 2),
    ("retired_pages.double_bit = 1",
     "len(nvml.nvmlDeviceGetRetiredPages_v2(h, nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR))", 1),
    ("retired_pages.pending = 1", "nvml.nvmlDeviceGetRetiredPagesPendingStatus(h)", 1),
    ("persistence_mode = 1", "nvml.nvmlDeviceGetPersistenceMode(h)", 1),
    ("compute_mode = 3", "nvml.nvmlDeviceGetComputeMode(h)", 3),
    ("mig.mode = 0", "nvml.nvmlDeviceGetMigMode(h)", [0, 0]),
]
# fmt: on


def test_each_numeric_key_and_not_supported_when_absent(pynvml_run: Pynvml) -> None:
    lines = [f"gpu0.{line}" for case in NUMERIC_CASES for line in case[0].splitlines()]
    exprs = [expr for _, expr, _ in NUMERIC_CASES]
    run = pynvml_run(
        "\n".join([*lines, "gpu1.name = no other keys"]) + "\n",
        f"""
        h0, h1 = (nvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
        out = []
        for expr in {exprs!r}:
            value = eval(expr, {{"nvml": nvml, "h": h0, "field": field}})
            missing = err(lambda: eval(expr, {{"nvml": nvml, "h": h1, "field": field}}))
            out.append([value, missing])
        emit(out)
        """,
    )
    for (_, expr, expected), (value, missing) in zip(NUMERIC_CASES, run.value, strict=True):
        assert value == expected, expr
        assert missing == "NVMLError_NotSupported", expr


def test_cycling_values_follow_the_time_since_first_init(pynvml_run: Pynvml) -> None:
    run = pynvml_run(
        """
        gpu0.utilization.gpu = 95,95,5@0.5
        gpu0.utilization.memory = 1
        gpu0.temperature.gpu = 60, 70 @ 1
        """,
        """
        t0 = time.monotonic()
        h = nvml.nvmlDeviceGetHandleByIndex(0)
        def sample():
            return [nvml.nvmlDeviceGetUtilizationRates(h).gpu, nvml.nvmlDeviceGetTemperature(h, 0)]
        first = sample()
        time.sleep(max(0.0, 1.25 - (time.monotonic() - t0)))
        later = sample()
        nvml.nvmlShutdown()
        nvml.nvmlInit()  # re-init keeps the time base
        emit([first, later, sample()])
        """,
    )
    assert run.value == [[95, 60], [5, 70], [5, 70]]


def test_bitmask_values_in_hex_and_supported_reasons(pynvml_run: Pynvml) -> None:
    run = pynvml_run(
        """
        gpu0.clock_event_reasons = 0x44
        gpu1.clock_event_reasons = 0x4, 0x40 @ 1000
        """,
        """
        h0, h1 = (nvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
        emit([nvml.nvmlDeviceGetCurrentClocksEventReasons(h0), nvml.nvmlDeviceGetCurrentClocksThrottleReasons(h0),
              nvml.nvmlDeviceGetCurrentClocksEventReasons(h1), nvml.nvmlDeviceGetSupportedClocksEventReasons(h0),
              nvml.nvmlDeviceGetSupportedClocksThrottleReasons(h1)])
        """,
    )
    assert run.value == [0x44, 0x44, 0x4, 0x7FF, 0x7FF]


def test_scenario_is_reread_when_the_file_changes(pynvml_run: Pynvml) -> None:
    run = pynvml_run(
        """
        gpu0.temperature.gpu = 50
        gpu1.temperature.gpu = 40
        """,
        """
        h0, h1 = (nvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
        temp = lambda h: nvml.nvmlDeviceGetTemperature(h, 0)
        out = [temp(h0)]
        rewrite("gpu0.temperature.gpu = 51\\ngpu1.temperature.gpu = 40\\n")  # new inode
        out.append(temp(h0))
        path = os.environ["FAKE_NVML_SCENARIO"]
        before = os.stat(path).st_mtime_ns
        with open(path, "w") as f:  # same inode, same size: only the mtime tells
            f.write("gpu0.temperature.gpu = 52\\ngpu1.temperature.gpu = 40\\n")
        os.utime(path, ns=(before + 5_000_000, before + 5_000_000))
        out.append(temp(h0))
        rewrite("gpu0.temperature.gpu = 53\\n")  # gpu1 vanishes
        out += [temp(h0), err(temp, h1), nvml.nvmlDeviceGetCount(), err(nvml.nvmlDeviceGetHandleByIndex, 1)]
        rewrite("device_count = 2\\ngpu0.temperature.gpu = 54\\n")  # back, with no keys of its own
        out += [err(temp, h1), nvml.nvmlDeviceGetCount()]
        rewrite("device_count = 1\\ngpu0.temperature.gpu = 54\\ngpu1.temperature.gpu = 41\\n")
        out += [err(temp, h1)]
        emit(out)
        """,
    )
    assert run.value == [
        50, 51, 52,
        53, "NVMLError_GpuIsLost", 1, "NVMLError_InvalidArgument",
        "NVMLError_NotSupported", 2,
        "NVMLError_GpuIsLost",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("DRIVER_NOT_LOADED", "NVMLError_DriverNotLoaded"),
        ("LIB_RM_VERSION_MISMATCH", "NVMLError_LibRmVersionMismatch"),
        ("NVML_ERROR_NO_PERMISSION", "NVMLError_NoPermission"),
        ("9", "NVMLError_DriverNotLoaded"),
    ],
)
def test_init_error_fails_every_init(pynvml_run: Pynvml, value: str, error: str) -> None:
    run = pynvml_run(
        f"init.error = {value}\ngpu0.name = x\n",
        """
        first = err(nvml.nvmlInit)
        lib = nvml.nvmlLib  # loaded by the failed attempt
        emit([first, lib.nvmlInit(), lib.nvmlInit_v2(), lib.nvmlInitWithFlags(0), err(nvml.nvmlDeviceGetCount)])
        """,
        init=False,
    )
    code = {"NVMLError_DriverNotLoaded": 9, "NVMLError_LibRmVersionMismatch": 18, "NVMLError_NoPermission": 4}[error]
    assert run.value == [error, code, code, code, "NVMLError_Uninitialized"]


def test_uninitialized_and_refcounted_init(pynvml_run: Pynvml) -> None:
    run = pynvml_run(
        "gpu0.name = x\n",
        """
        lib = nvml.nvmlLib
        count = ctypes.c_uint()
        nvml.nvmlInit()
        nvml.nvmlShutdown()
        still = nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(0))
        nvml.nvmlShutdown()
        emit([still, lib.nvmlDeviceGetCount_v2(ctypes.byref(count)), lib.nvmlShutdown(),
              lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(ctypes.c_void_p()))])
        """,
    )
    assert run.value == ["x", 1, 1, 1]  # NVML_ERROR_UNINITIALIZED


def test_forced_errors_by_base_or_versioned_symbol(pynvml_run: Pynvml) -> None:
    run = pynvml_run(
        """
        gpu0.memory.total = 100
        gpu0.memory.used = 10
        gpu0.power.usage = 100
        gpu0.error.nvmlDeviceGetPciInfo = GPU_IS_LOST
        gpu0.error.nvmlDeviceGetMemoryInfo = NOT_SUPPORTED
        gpu1.name = b
        gpu1.memory.total = 100
        gpu1.memory.used = 10
        gpu1.power.usage = 200
        gpu1.error.nvmlDeviceGetMemoryInfo_v2 = NO_PERMISSION
        gpu1.error.nvmlDeviceGetPciInfo_v3 = 999
        gpu1.error.nvmlDeviceGetPowerUsage = BOGUS_NAME
        gpu1.error.nvmlDeviceGetName = INSUFFICIENT_POWER
        gpu1.error.nvmlDeviceGetComputeRunningProcesses = TIMEOUT
        gpu1.error.nvmlDeviceGetHandleByIndex = SUCCESS
        """,
        """
        h0, h1 = (nvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
        mem = lambda h: nvml.nvmlDeviceGetMemoryInfo(h).used
        mem2 = lambda h: nvml.nvmlDeviceGetMemoryInfo(h, version=nvml.nvmlMemory_v2).used
        emit([
            err(nvml.nvmlDeviceGetPciInfo, h0), err(mem, h0), err(mem2, h0), nvml.nvmlDeviceGetPowerUsage(h0),
            mem(h1), err(mem2, h1), err(nvml.nvmlDeviceGetPciInfo, h1), err(nvml.nvmlDeviceGetPowerUsage, h1),
            err(nvml.nvmlDeviceGetName, h1), err(nvml.nvmlDeviceGetComputeRunningProcesses, h1),
        ])
        """,
    )
    assert run.value == [
        "NVMLError_GpuIsLost", "NVMLError_NotSupported", "NVMLError_NotSupported", 100,
        10, "NVMLError_NoPermission", "NVMLError_Unknown", "NVMLError_Unknown",
        "NVMLError_InsufficientPower", "NVMLError_Timeout",
    ]  # fmt: skip
    assert run.stderr.count("BOGUS_NAME") == 1  # warned once, not per call


def test_host_level_faults_apply_to_calls_about_no_device(pynvml_run: Pynvml) -> None:
    run = pynvml_run(
        """
        gpu0.name = x
        error.nvmlDeviceGetCount = UNKNOWN
        error.nvmlEventSetWait_v2 = DRIVER_NOT_LOADED
        delay.nvmlSystemGetDriverVersion = 0.3
        """,
        """
        es = nvml.nvmlEventSetCreate()
        start = time.monotonic()
        version = nvml.nvmlSystemGetDriverVersion()
        emit([err(nvml.nvmlDeviceGetCount), err(nvml.nvmlEventSetWait, es, 10), version, time.monotonic() - start,
              nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(0))])
        """,
    )
    count, wait, version, seconds, name = run.value
    assert [count, wait, version, name] == ["NVMLError_Unknown", "NVMLError_DriverNotLoaded", "999.99", "x"]
    assert seconds >= 0.28


def test_delay_blocks_only_the_delayed_call(pynvml_run: Pynvml) -> None:
    run = pynvml_run(
        """
        gpu0.name = hung
        gpu0.power.usage = 100
        gpu0.delay.nvmlDeviceGetPowerUsage = 0.8
        gpu1.power.usage = 200
        """,
        """
        h0, h1 = (nvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
        slow = {}
        def hung():
            start = time.monotonic()
            slow["value"] = nvml.nvmlDeviceGetPowerUsage(h0)
            slow["seconds"] = time.monotonic() - start
        thread = threading.Thread(target=hung)
        thread.start()
        time.sleep(0.1)
        start = time.monotonic()
        others = [nvml.nvmlDeviceGetPowerUsage(h1) for _ in range(20)] + [nvml.nvmlDeviceGetName(h0)]
        others_seconds = time.monotonic() - start
        was_waiting = thread.is_alive()
        thread.join()
        emit([slow["value"], slow["seconds"], others[0], others[-1], others_seconds, was_waiting])
        """,
    )
    value, seconds, other_value, name, others_seconds, was_waiting = run.value
    assert (value, other_value, name) == (100, 200, "hung")
    assert seconds >= 0.75
    assert others_seconds < 0.4 and was_waiting
    assert run.trace.count("nvmlDeviceGetPowerUsage gpu1") == 20


def test_lost_after_and_recovery_when_the_key_changes(pynvml_run: Pynvml) -> None:
    run = pynvml_run(
        """
        gpu0.temperature.gpu = 50
        gpu0.lost_after = 0.4
        gpu1.temperature.gpu = 51
        """,
        """
        t0 = time.monotonic()
        h0, h1 = (nvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
        temp = lambda h: nvml.nvmlDeviceGetTemperature(h, 0)
        out = [temp(h0)]
        time.sleep(max(0.0, 0.6 - (time.monotonic() - t0)))
        out += [err(temp, h0), err(nvml.nvmlDeviceGetUUID, h0), err(nvml.nvmlDeviceGetHandleByIndex, 0), temp(h1)]
        rewrite("gpu0.temperature.gpu = 50\\ngpu1.temperature.gpu = 51\\n")
        out.append(temp(h0))
        emit(out)
        """,
    )
    assert run.value == [50, "NVMLError_GpuIsLost", "NVMLError_GpuIsLost", "NVMLError_GpuIsLost", 51, 50]


def test_absurd_values(pynvml_run: Pynvml) -> None:
    run = pynvml_run(
        """
        gpu0.absurd = 1
        gpu0.temperature.gpu = 50
        gpu0.utilization.gpu = 10
        gpu0.utilization.memory = 10
        """,
        """
        h = nvml.nvmlDeviceGetHandleByIndex(0)
        u = nvml.nvmlDeviceGetUtilizationRates(h)
        emit([nvml.nvmlDeviceGetTemperature(h, 0), nvml.nvmlDeviceGetTemperatureV(h, 0),
              field(h, nvml.NVML_FI_DEV_MEMORY_TEMP), u.gpu, u.memory,
              nvml.nvmlDeviceGetEncoderUtilization(h)[0], nvml.nvmlDeviceGetDecoderUtilization(h)[0]])
        """,
    )
    assert run.value == [644245923, 644245923, 644245923, 4294967295, 4294967295, 4294967295, 4294967295]


def test_xids_are_delivered_once_when_due(pynvml_run: Pynvml) -> None:
    run = pynvml_run(
        """
        gpu0.xid = 79@0.4, 13@0.1
        gpu1.xid = 48@0.2
        gpu2.xid = 31@0.5
        gpu2.lost_after = 0.3
        gpu3.xid = 94@0.1
        """,
        """
        hs = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(4)]
        es = nvml.nvmlEventSetCreate()
        for h in hs[:3]:  # gpu3 is not registered
            nvml.nvmlDeviceRegisterEvents(h, nvml.nvmlEventTypeXidCriticalError, es)
        supported = nvml.nvmlDeviceGetSupportedEventTypes(hs[0])
        t0 = time.monotonic()
        got = []
        for _ in range(3):
            d = nvml.nvmlEventSetWait(es, 2000)
            got.append([nvml.nvmlDeviceGetIndex(d.device), d.eventType, d.eventData,
                        d.gpuInstanceId, d.computeInstanceId, time.monotonic() - t0])
        start = time.monotonic()
        timeout = [err(nvml.nvmlEventSetWait, es, 500), time.monotonic() - start]
        rewrite(scenario() + "gpu1.xid = 48@0.2, 43@0\\n")  # the old ones are not delivered again
        d = nvml.nvmlEventSetWait(es, 1000)
        again = [nvml.nvmlDeviceGetIndex(d.device), d.eventData]
        nvml.nvmlShutdown()
        nvml.nvmlInit()
        after_reinit = err(nvml.nvmlEventSetWait, es, 100)
        nvml.nvmlEventSetFree(es)
        emit([supported, got, timeout, again, after_reinit])
        """,
    )
    supported, got, timeout, again, after_reinit = run.value
    assert supported == 0x1F
    assert [g[:5] for g in got] == [[0, 8, 13, 2**32 - 1, 2**32 - 1], [1, 8, 48, 2**32 - 1, 2**32 - 1],
                                    [0, 8, 79, 2**32 - 1, 2**32 - 1]]  # fmt: skip
    assert got[0][5] >= 0.05 and got[2][5] >= 0.35  # not before they are due
    assert timeout[0] == "NVMLError_Timeout" and timeout[1] >= 0.45
    assert again == [1, 43]
    assert after_reinit == "NVMLError_Timeout"


def test_xid_due_at_the_instant_of_loss_is_delivered_after_it(pynvml_run: Pynvml) -> None:
    """A driver posts Xid 79 as the GPU falls off the bus: staged at the instant of the loss, the Xid
    arrives while the GPU's calls already answer GPU_IS_LOST; one due after the loss never does."""
    run = pynvml_run(
        """
        gpu0.temperature.gpu = 40
        gpu0.xid = 79@0.3, 13@0.6
        gpu0.lost_after = 0.3
        """,
        """
        h = nvml.nvmlDeviceGetHandleByIndex(0)
        es = nvml.nvmlEventSetCreate()
        nvml.nvmlDeviceRegisterEvents(h, nvml.nvmlEventTypeXidCriticalError, es)
        before = err(nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU)
        d = nvml.nvmlEventSetWait(es, 3000)
        own = ctypes.cast(d.device, ctypes.c_void_p).value == ctypes.cast(h, ctypes.c_void_p).value
        lost = err(nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU)
        later = err(nvml.nvmlEventSetWait, es, 700)  # 13@0.6 falls due after the loss: never posted
        emit([before, own, d.eventData, lost, later])
        """,
    )
    assert run.value == [None, True, 79, "NVMLError_GpuIsLost", "NVMLError_Timeout"]


def test_mig_devices(pynvml_run: Pynvml) -> None:
    run = pynvml_run(
        """
        gpu0.name = NVIDIA A100-SXM4-40GB
        gpu0.mig.mode = 1
        gpu0.utilization.gpu = 50
        gpu0.utilization.memory = 5
        gpu0.mig.0.gpu_instance_id = 1
        gpu0.mig.0.compute_instance_id = 0
        gpu0.mig.0.profile = 1g.5gb
        gpu0.mig.0.uuid = MIG-11111111-2222-3333-4444-555555555555
        gpu0.mig.0.memory.total = 5368709120
        gpu0.mig.0.memory.used = 1073741824
        gpu0.mig.2.gpu_instance_id = 5
        gpu0.mig.2.compute_instance_id = 1
        gpu0.mig.2.profile = 2g.10gb
        gpu0.mig.2.memory.total = 10737418240
        gpu0.mig.2.memory.used = 0
        gpu1.name = NVIDIA A100-SXM4-40GB
        """,
        """
        h0, h1 = (nvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
        top = nvml.nvmlDeviceGetMaxMigDeviceCount(h0)
        found = {}
        for k in range(top):
            try:
                found[k] = nvml.nvmlDeviceGetMigDeviceHandleByIndex(h0, k)
            except nvml.NVMLError_NotFound:
                pass
        is_mig = lambda h: int(nvml.nvmlDeviceIsMigDeviceHandle(h).value)  # pynvml returns the c_uint
        migs = []
        for k, m in found.items():
            m1 = nvml.nvmlDeviceGetMemoryInfo(m)
            m2 = nvml.nvmlDeviceGetMemoryInfo(m, version=nvml.nvmlMemory_v2)
            migs.append([k, is_mig(m),
                         nvml.nvmlDeviceGetIndex(nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m)),
                         nvml.nvmlDeviceGetGpuInstanceId(m), nvml.nvmlDeviceGetComputeInstanceId(m),
                         nvml.nvmlDeviceGetUUID(m), nvml.nvmlDeviceGetName(m),
                         [m1.total, m1.used, m1.free], [m2.reserved, m2.used],
                         err(nvml.nvmlDeviceGetUtilizationRates, m)])
        by_uuid = is_mig(nvml.nvmlDeviceGetHandleByUUID(migs[1][5]))
        parent = [is_mig(h0), nvml.nvmlDeviceGetUtilizationRates(h0).gpu, err(nvml.nvmlDeviceGetGpuInstanceId, h0)]
        rewrite(scenario() + "gpu0.error.nvmlDeviceGetGpuInstanceId = NO_PERMISSION\\n")
        parent_rule = err(nvml.nvmlDeviceGetGpuInstanceId, found[0])
        emit({"mode": nvml.nvmlDeviceGetMigMode(h0), "max": top, "migs": migs,
              "parent": parent,
              "plain": [err(nvml.nvmlDeviceGetMigMode, h1), nvml.nvmlDeviceGetMaxMigDeviceCount(h1)],
              "by_uuid": by_uuid, "parent_rule": parent_rule})
        """,
    )
    v = run.value
    assert v["mode"] == [1, 1] and v["max"] == 7
    assert v["migs"] == [
        [0, 1, 0, 1, 0, "MIG-11111111-2222-3333-4444-555555555555", "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
         [5368709120, 1073741824, 4294967296], [0, 1073741824], "NVMLError_NotSupported"],
        [2, 1, 0, 5, 1, "MIG-00000000-0000-0000-0000-000000000002", "NVIDIA A100-SXM4-40GB MIG 2g.10gb",
         [10737418240, 0, 10737418240], [0, 0], "NVMLError_NotSupported"],
    ]  # fmt: skip
    assert v["parent"] == [0, 50, "NVMLError_InvalidArgument"]
    assert v["plain"] == ["NVMLError_NotSupported", 0]
    assert v["by_uuid"] == 1
    assert v["parent_rule"] == "NVMLError_NoPermission"


def test_processes_and_their_utilization(pynvml_run: Pynvml) -> None:
    run = pynvml_run(
        """
        gpu0.process.0.pid = 4242
        gpu0.process.0.used_memory = 1073741824
        gpu0.process.0.name = python3 train.py
        gpu0.process.0.sm_util = 80
        gpu0.process.0.mem_util = 30
        gpu0.process.0.enc_util = 1
        gpu0.process.0.dec_util = 2
        gpu0.process.3.pid = 4343
        gpu0.process.3.name = worker
        gpu1.name = idle
        """,
        """
        h0, h1 = (nvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
        procs = lambda f, h: [[p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId] for p in f(h)]
        samples = nvml.nvmlDeviceGetProcessUtilization(h0, 0)
        emit({
            "compute": procs(nvml.nvmlDeviceGetComputeRunningProcesses, h0),
            "compute_v2": procs(nvml.nvmlDeviceGetComputeRunningProcesses_v2, h0),
            "graphics": procs(nvml.nvmlDeviceGetGraphicsRunningProcesses, h0),
            "mps": procs(nvml.nvmlDeviceGetMPSComputeRunningProcesses, h0),
            "util": [[s.pid, s.smUtil, s.memUtil, s.encUtil, s.decUtil, s.timeStamp > 0] for s in samples],
            "names": [nvml.nvmlSystemGetProcessName(4242), nvml.nvmlSystemGetProcessName(4343),
                      err(nvml.nvmlSystemGetProcessName, 1)],
            "idle": [procs(nvml.nvmlDeviceGetComputeRunningProcesses, h1),
                     err(nvml.nvmlDeviceGetProcessUtilization, h1, 0)],
        })
        """,
    )
    none = 2**32 - 1
    v = run.value
    assert v["compute"] == [[4242, 1073741824, none, none], [4343, None, none, none]]
    assert v["compute_v2"] == v["compute"]
    assert v["graphics"] == v["mps"] == []
    assert v["util"] == [[4242, 80, 30, 1, 2, True], [4343, 0, 0, 0, 0, True]]
    assert v["names"] == ["python3 train.py", "worker", "NVMLError_NotFound"]
    assert v["idle"] == [[], "NVMLError_NotFound"]


def test_graphics_processes_and_mig_instance_ids(pynvml_run: Pynvml) -> None:
    run = pynvml_run(
        """
        gpu0.mig.mode = 1
        gpu0.process.0.pid = 100
        gpu0.process.0.used_memory = 1024
        gpu0.process.0.gpu_instance_id = 3
        gpu0.process.0.compute_instance_id = 0
        gpu0.process.0.sm_util = 40
        gpu0.process.1.pid = 200
        gpu0.process.1.graphics = 1
        gpu0.process.1.name = Xorg
        gpu0.process.1.used_memory = 2048
        gpu0.process.1.sm_util = 5
        gpu0.process.1.dec_util = 7
        gpu0.process.2.pid = 300
        gpu0.process.2.graphics = 0
        gpu0.process.2.gpu_instance_id = 0x1
        gpu0.process.3.pid = 400
        gpu0.process.3.graphics = 1
        gpu0.process.3.gpu_instance_id = 5
        gpu0.process.3.compute_instance_id = 2
        """,
        """
        h = nvml.nvmlDeviceGetHandleByIndex(0)
        procs = lambda f: [[p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId] for p in f(h)]
        emit({
            "compute": procs(nvml.nvmlDeviceGetComputeRunningProcesses),
            "compute_v2": procs(nvml.nvmlDeviceGetComputeRunningProcesses_v2),
            "graphics": procs(nvml.nvmlDeviceGetGraphicsRunningProcesses),
            "graphics_v2": procs(nvml.nvmlDeviceGetGraphicsRunningProcesses_v2),
            "mps": procs(nvml.nvmlDeviceGetMPSComputeRunningProcesses),
            "util": [[s.pid, s.smUtil, s.decUtil] for s in nvml.nvmlDeviceGetProcessUtilization(h, 0)],
            "name": nvml.nvmlSystemGetProcessName(200),
        })
        """,
    )
    none = 2**32 - 1
    v = run.value
    assert v["compute"] == v["compute_v2"] == [[100, 1024, 3, 0], [300, None, 1, none]]
    assert v["graphics"] == v["graphics_v2"] == [[200, 2048, none, none], [400, None, 5, 2]]
    assert v["mps"] == []
    assert v["util"] == [[100, 40, 0], [200, 5, 7], [300, 0, 0], [400, 0, 0]]
    assert v["name"] == "Xorg"


def test_process_utilization_honours_last_seen_timestamp(pynvml_run: Pynvml) -> None:
    run = pynvml_run(
        """
        gpu0.process.0.pid = 100
        gpu0.process.1.pid = 200
        gpu0.process.1.graphics = 1
        """,
        """
        h = nvml.nvmlDeviceGetHandleByIndex(0)
        before = time.time_ns() // 1000
        first = nvml.nvmlDeviceGetProcessUtilization(h, 0)
        after = time.time_ns() // 1000
        last = max(s.timeStamp for s in first)
        time.sleep(0.01)
        again = nvml.nvmlDeviceGetProcessUtilization(h, last)
        emit({
            "first": [[s.pid, before <= s.timeStamp <= after] for s in first],
            "newer": [[s.pid, s.timeStamp > last] for s in again],
            "future": err(nvml.nvmlDeviceGetProcessUtilization, h, after + 3600 * 10**6),
            "now": err(nvml.nvmlDeviceGetProcessUtilization, h, 2**64 - 1),
        })
        """,
    )
    v = run.value
    assert v["first"] == [[100, True], [200, True]]
    assert v["newer"] == [[100, True], [200, True]]
    assert v["future"] == v["now"] == "NVMLError_NotFound"


def test_nvlink_state_counters_and_fields(pynvml_run: Pynvml) -> None:
    run = pynvml_run(
        """
        gpu0.nvlink.0.state = 1
        gpu0.nvlink.0.tx = 1000
        gpu0.nvlink.0.rx = 2000
        gpu0.nvlink.0.crc_errors = 3
        gpu0.nvlink.0.replay_errors = 4
        gpu0.nvlink.0.recovery_errors = 5
        gpu0.nvlink.1.state = 0
        gpu0.nvlink.7.crc_errors = 10
        """,
        """
        h = nvml.nvmlDeviceGetHandleByIndex(0)
        counter = lambda link, c: nvml.nvmlDeviceGetNvLinkErrorCounter(h, link, c)
        F = nvml
        fields = [(F.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0), (F.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 0),
                  (F.NVML_FI_DEV_NVLINK_LINK_COUNT, 0), (F.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L0, 0),
                  (F.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L7, 0),
                  (F.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL, 0),
                  (F.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL, 0), (F.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 1),
                  (F.NVML_FI_DEV_MEMORY_TEMP, 0), (9999, 0)]
        values = nvml.nvmlDeviceGetFieldValues(h, fields)
        emit({
            "state": [nvml.nvmlDeviceGetNvLinkState(h, 0), nvml.nvmlDeviceGetNvLinkState(h, 1),
                      err(nvml.nvmlDeviceGetNvLinkState, h, 2)],
            "counters": [counter(0, nvml.NVML_NVLINK_ERROR_DL_CRC_DATA), counter(0, nvml.NVML_NVLINK_ERROR_DL_REPLAY),
                         counter(0, nvml.NVML_NVLINK_ERROR_DL_RECOVERY),
                         err(counter, 1, nvml.NVML_NVLINK_ERROR_DL_CRC_DATA)],
            "fields": [[v.fieldId, v.scopeId, v.nvmlReturn,
                        v.value.uiVal if v.valueType == nvml.NVML_VALUE_TYPE_UNSIGNED_INT else v.value.ullVal,
                        v.timestamp > 0] for v in values],
        })
        """,
    )
    v = run.value
    assert v["state"] == [1, 0, "NVMLError_NotSupported"]
    assert v["counters"] == [3, 4, 5, "NVMLError_NotSupported"]
    assert [f[2:] for f in v["fields"]] == [
        [0, 1000, True], [0, 2000, True], [0, 8, True], [0, 3, True], [0, 10, True], [0, 13, True],
        [0, 4, True], [3, 0, True], [3, 0, True], [3, 0, True],
    ]  # fmt: skip


def test_unexported_symbol_is_function_not_found(pynvml_run: Pynvml) -> None:
    run = pynvml_run(
        "gpu0.name = x\n",
        """
        h = nvml.nvmlDeviceGetHandleByIndex(0)
        emit([err(nvml.nvmlDeviceGetPowerState, h), err(nvml.nvmlDeviceGetBoardId, h)])
        """,
    )
    assert run.value == ["NVMLError_FunctionNotFound"] * 2


def test_trace_records_every_call(pynvml_run: Pynvml) -> None:
    run = pynvml_run(
        "gpu0.name = a\ngpu1.name = b\n",
        """
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            nvml.nvmlDeviceGetName(h)
            err(nvml.nvmlDeviceGetFanSpeed, h)
        nvml.nvmlErrorString(3)
        nvml.nvmlShutdown()
        nvml.nvmlLib.nvmlShutdown()
        emit(None)
        """,
    )
    assert run.trace == [
        "nvmlInitWithFlags -",
        "nvmlDeviceGetCount_v2 -",
        "nvmlDeviceGetHandleByIndex_v2 gpu0",
        "nvmlDeviceGetName gpu0",
        "nvmlDeviceGetFanSpeed gpu0",
        "nvmlDeviceGetHandleByIndex_v2 gpu1",
        "nvmlDeviceGetName gpu1",
        "nvmlDeviceGetFanSpeed gpu1",
        "nvmlErrorString -",
        "nvmlShutdown -",
        "nvmlShutdown -",
    ]


def test_concurrent_sampling_while_the_file_is_rewritten(pynvml_run: Pynvml) -> None:
    run = pynvml_run(
        "gpu0.temperature.gpu = 0\ngpu1.temperature.gpu = 0\ngpu2.temperature.gpu = 0\n",
        """
        hs = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(3)]
        stop = threading.Event()
        seen, failures = set(), []
        def sample(h):
            while not stop.is_set():
                try:
                    seen.add(nvml.nvmlDeviceGetTemperature(h, 0))
                    nvml.nvmlDeviceGetMemoryInfo(h)
                except nvml.NVMLError_NotSupported:
                    pass
                except Exception as exc:
                    failures.append(repr(exc))
        threads = [threading.Thread(target=sample, args=(hs[i % 3],)) for i in range(8)]
        for t in threads:
            t.start()
        for i in range(1, 41):
            rewrite("".join(f"gpu{g}.temperature.gpu = {i}\\ngpu{g}.memory.total = 100\\ngpu{g}.memory.used = {i}\\n"
                            for g in range(3)))
            time.sleep(0.01)
        stop.set()
        for t in threads:
            t.join()
        emit([sorted(seen), failures])
        """,
    )
    seen, failures = run.value
    assert failures == []
    assert set(seen) <= set(range(41)) and 40 in seen


GPM_HOST = """
    gpu0.name = NVIDIA H100 80GB HBM3
    gpu0.gpm_supported = 1
    gpu0.gpm.sm_util = 62.5
    gpu0.gpm.sm_occupancy = 31.25
    gpu0.gpm.any_tensor_util = 40
    gpu0.gpm.pcie_rx_per_sec = 1500.5
    gpu0.gpm.nvlink_l3_tx_per_sec = 1024
    gpu0.gpm.nvlink_l40_rx_per_sec = 7
    gpu0.gpm.graphics_util = 20,80@0.1
    gpu1.name = NVIDIA A100-SXM4-80GB
    gpu1.gpm_supported = 0
    gpu1.gpm.sm_util = 50
    gpu2.gpm_supported = 1
    gpu2.gpm.sm_util = 50
    gpu2.error.nvmlGpmSampleGet = IN_USE
    gpu3.gpm_supported = 1
    gpu3.mig.mode = 1
    gpu3.mig.0.gpu_instance_id = 1
    gpu3.mig.0.profile = 3g.40gb
    gpu3.mig.0.gpm.sm_util = 25
    gpu3.mig.1.gpu_instance_id = 2
    gpu3.mig.1.profile = 3g.40gb
    gpu3.mig.1.gpm.sm_util = 75
"""

GPM_PRELUDE = """
def metrics(one, two, ids, version=nvml.NVML_GPM_METRICS_GET_VERSION):
    get = nvml.c_nvmlGpmMetricsGet_t()
    get.version, get.numMetrics, get.sample1, get.sample2 = version, len(ids), one, two
    for i, metric in enumerate(ids):
        get.metrics[i].metricId = metric
    nvml.nvmlGpmMetricsGet(get)
    return [get.metrics[i].value if get.metrics[i].nvmlReturn == 0 else get.metrics[i].nvmlReturn
            for i in range(len(ids))]

def pair(take):
    one, two = nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()
    take(one)
    time.sleep(0.25)  # the interval measured, not a wait for an event
    take(two)
    return one, two
"""


def test_gpm_metrics_from_two_samples(pynvml_run: Pynvml) -> None:
    r = pynvml_run(
        GPM_HOST,
        GPM_PRELUDE
        + textwrap.dedent(
            """
        h = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(4)]
        one, two = pair(lambda s: nvml.nvmlGpmSampleGet(h[0], s))
        ids = [nvml.NVML_GPM_METRIC_SM_UTIL, nvml.NVML_GPM_METRIC_SM_OCCUPANCY, nvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
               nvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC, nvml.NVML_GPM_METRIC_NVLINK_L3_TX_PER_SEC,
               nvml.NVML_GPM_METRIC_NVLINK_L40_RX_PER_SEC, nvml.NVML_GPM_METRIC_FP64_UTIL,
               nvml.NVML_GPM_METRIC_SM_CYCLES_ELAPSED, nvml.NVML_GPM_METRIC_GRAPHICS_UTIL]
        out = {"gpu0": metrics(one, two, ids)}
        out["reversed"] = err(metrics, two, one, ids)
        out["version"] = err(metrics, one, two, ids, 2)
        fresh = nvml.nvmlGpmSampleAlloc()
        out["unfilled"] = err(metrics, one, fresh, ids)
        out["pre_hopper"] = err(nvml.nvmlGpmSampleGet, h[1], fresh)
        out["in_use"] = err(nvml.nvmlGpmSampleGet, h[2], fresh)
        nvml.nvmlGpmSampleGet(h[3], fresh)
        out["other_gpu"] = err(metrics, one, fresh, ids)
        m1, m2 = pair(lambda s: nvml.nvmlGpmMigSampleGet(h[3], 2, s))
        out["mig_gi2"] = metrics(m1, m2, [nvml.NVML_GPM_METRIC_SM_UTIL])
        mig0 = nvml.nvmlDeviceGetMigDeviceHandleByIndex(h[3], 0)
        m3, m4 = pair(lambda s: nvml.nvmlGpmSampleGet(mig0, s))
        out["mig_handle"] = metrics(m3, m4, [nvml.NVML_GPM_METRIC_SM_UTIL])
        out["no_gi"] = err(nvml.nvmlGpmMigSampleGet, h[3], 9, m1)
        out["not_mig"] = err(nvml.nvmlGpmMigSampleGet, h[0], 1, m1)
        nvml.nvmlGpmSampleFree(fresh)
        out["double_free"] = err(nvml.nvmlGpmSampleFree, fresh)
        out["after_free"] = err(nvml.nvmlGpmSampleGet, h[0], fresh)
        emit(out)
        """
        ),
    )
    v = r.value
    not_supported = 3
    assert v["gpu0"][:7] == [62.5, 31.25, 40.0, 1500.5, 1024.0, 7.0, not_supported]
    assert v["gpu0"][7] == not_supported  # a counter id the fake does not model
    assert 20.0 <= v["gpu0"][8] <= 80.0  # a cycle: its mean over the interval
    assert v["reversed"] == v["unfilled"] == v["other_gpu"] == "NVMLError_InvalidArgument"
    assert v["version"] == "NVMLError_ArgumentVersionMismatch"
    assert v["pre_hopper"] == "NVMLError_NotSupported"
    assert v["in_use"] == "NVMLError_InUse"
    assert v["mig_gi2"] == [75.0]
    assert v["mig_handle"] == [25.0]
    assert v["no_gi"] == "NVMLError_NotFound"
    assert v["not_mig"] == "NVMLError_NotSupported"
    assert v["double_free"] == v["after_free"] == "NVMLError_InvalidArgument"
    assert r.trace.count("nvmlGpmSampleGet gpu0") == 3  # two samples and the one after the free


def test_gpm_counters_are_cumulative_across_a_scenario_rewrite(pynvml_run: Pynvml) -> None:
    """A new level counts from the sample that first sees it: the counters never jump."""
    r = pynvml_run(
        "gpu0.gpm_supported = 1\ngpu0.gpm.sm_util = 50\n",
        GPM_PRELUDE
        + textwrap.dedent(
            """
        h = nvml.nvmlDeviceGetHandleByIndex(0)
        take = lambda s: nvml.nvmlGpmSampleGet(h, s)
        one, two = pair(take)
        first = metrics(one, two, [nvml.NVML_GPM_METRIC_SM_UTIL])
        rewrite(scenario().replace("sm_util = 50", "sm_util = 10"))
        three = nvml.nvmlGpmSampleAlloc()
        time.sleep(0.25)
        take(three)
        emit([first, metrics(two, three, [nvml.NVML_GPM_METRIC_SM_UTIL])])
        """
        ),
    )
    assert r.value == [[50.0], [10.0]]


DIPS = ",".join(["70"] * 22 + ["5"] * 3) + "@0.1"  # 5 % for 0.3 s every 2.5 s


def test_sample_buffers_hold_the_drivers_samples_since_a_timestamp(pynvml_run: Pynvml) -> None:
    """nvmlDeviceGetSamples as nvml.h describes it and an H200 on driver 580 answered it: samples newer
    than lastSeenTimeStamp, oldest first, unsigned int, stamped in wall-clock µs, rings full from the
    start; the NULL call answers the ring's size plus one whatever the timestamp; a buffer NOT_FOUND when
    none is newer; utilisation samples are busy percents over their 200 ms; clock buffers empty unless
    samples.clocks; NOT_SUPPORTED per type (key absent, samples.unsupported, utilisation in MIG mode);
    module power INVALID_ARGUMENT."""
    run = pynvml_run(
        f"""
        gpu0.utilization.gpu = {DIPS}
        gpu0.utilization.memory = 40
        gpu0.power.usage = 300000
        gpu0.clock.sm = 1980
        gpu0.clock.memory = 2619
        gpu0.samples.clocks = 1
        gpu0.samples.unsupported = memory_clk
        gpu1.utilization.gpu = 50
        gpu1.clock.sm = 1000
        gpu1.mig.mode = 1
        """,
        """
        import ctypes, time
        h0, h1 = (nvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
        wall = time.time() * 1e6
        first = nvml.nvmlDeviceGetSamples(h0, nvml.NVML_GPU_UTILIZATION_SAMPLES, 0)[1]
        out = {"first": [len(first), first[-1].timeStamp - wall, first[0].sampleValue.uiVal]}
        time.sleep(2.7)
        kind, samples = nvml.nvmlDeviceGetSamples(h0, nvml.NVML_GPU_UTILIZATION_SAMPLES, first[-1].timeStamp)
        out["kind"] = kind
        out["util"] = [(s.timeStamp - first[-1].timeStamp, s.sampleValue.uiVal) for s in samples]
        last = samples[-1].timeStamp
        out["again"] = err(lambda: nvml.nvmlDeviceGetSamples(h0, nvml.NVML_GPU_UTILIZATION_SAMPLES, last))
        out["power"] = [(s.timeStamp, s.sampleValue.uiVal) for s in nvml.nvmlDeviceGetSamples(h0, 0, 0)[1]]
        fn = nvml._nvmlGetFunctionPointer("nvmlDeviceGetSamples")
        buf, count, vt = (nvml.c_nvmlSample_t * 3)(), ctypes.c_uint(3), nvml._nvmlValueType_t()
        out["short"] = [fn(h0, 1, ctypes.c_ulonglong(0), ctypes.byref(vt), ctypes.byref(count), buf), count.value,
                        [buf[i].timeStamp for i in range(count.value)]]
        count = ctypes.c_uint(0)
        out["null_past_newest"] = [fn(h0, 1, ctypes.c_ulonglong(last), ctypes.byref(vt), ctypes.byref(count), None),
                                   count.value]
        count = ctypes.c_uint(0)
        out["zero"] = fn(h0, 1, ctypes.c_ulonglong(0), ctypes.byref(vt), ctypes.byref(count), buf)
        out["types"] = [err(lambda: len(nvml.nvmlDeviceGetSamples(h, t, 0)[1]))
                        for h in (h0, h1) for t in range(11)]
        emit(out)
        """,
    )
    out = run.value
    count, newest_after_wall, oldest_value = out["first"]
    assert count == 71 and -200000 - 5000 <= newest_after_wall <= 5000  # a full ring, wall-clock µs
    assert oldest_value == 70  # before init: the value at init
    assert out["kind"] == 1  # NVML_VALUE_TYPE_UNSIGNED_INT
    stamps = [t for t, _ in out["util"]]
    assert stamps[0] == 200000 and len(stamps) >= 12
    assert all(b - a == 200000 for a, b in zip(stamps, stamps[1:], strict=False))
    # Each sample is the busy percent over its 200 ms: the mean of the 0.1 s steps it covers (truncated).
    # (2.2, 2.4] lies in a dip: 5; (2.4, 2.6] half in it: 37.5, truncated; the others 70.
    values = [v for _, v in out["util"]]
    assert set(values) == {70, 37, 5}
    assert out["again"] == "NVMLError_NotFound"
    power = [t for t, _ in out["power"]]
    assert len(power) >= 100 and all(b - a == 20000 for a, b in zip(power, power[1:], strict=False))
    assert {v for _, v in out["power"]} == {300000}
    assert out["short"][:2] == [0, 3] and out["short"][2] == sorted(out["short"][2])  # the oldest three
    assert out["null_past_newest"] == [0, 72]  # the ring's size plus one, whatever the timestamp
    assert out["zero"] == 2  # INVALID_ARGUMENT: a buffer of 0 entries
    found = out["types"]
    assert [v is None for v in found[:11]] == [True, True, True, False, False, True] + [False] * 5
    assert found[3] == found[4] == found[6] == found[8] == found[9] == "NVMLError_NotSupported"
    assert found[7] == found[10] == "NVMLError_InvalidArgument"  # module power: as an H200 answered
    # MIG mode: utilisation types not supported (nvml.h's note); clocks without samples.clocks: empty
    assert found[11 + 1] == "NVMLError_NotSupported" and found[11 + 5] == "NVMLError_NotFound"


def test_sample_ring_is_bounded_like_the_drivers(pynvml_run: Pynvml) -> None:
    """Power samples: 20 ms apart, 119 kept (2.4 s), as an H200 keeps them."""
    run = pynvml_run(
        "gpu0.power.usage = 250000\n",
        """
        import time
        h = nvml.nvmlDeviceGetHandleByIndex(0)
        time.sleep(3.0)
        samples = nvml.nvmlDeviceGetSamples(h, nvml.NVML_TOTAL_POWER_SAMPLES, 0)[1]
        emit([len(samples), samples[-1].timeStamp - samples[0].timeStamp])
        """,
    )
    assert run.value == [119, 118 * 20000]


def test_energy_counter_is_the_integral_of_power(pynvml_run: Pynvml) -> None:
    """nvmlDeviceGetTotalEnergyConsumption: `energy` (mJ) plus the integral of power.usage since init,
    a cycle step by step; the energy field entries read the same counter."""
    run = pynvml_run(
        """
        gpu0.energy = 1000000
        gpu0.power.usage = 100000,300000@0.5
        gpu1.energy = 5
        """,
        """
        import time
        h0, h1 = (nvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
        a = nvml.nvmlDeviceGetTotalEnergyConsumption(h0)
        time.sleep(2.0)
        b = nvml.nvmlDeviceGetTotalEnergyConsumption(h0)
        f = field(h0, nvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION)
        emit([a, b, f, nvml.nvmlDeviceGetTotalEnergyConsumption(h1)])
        """,
    )
    a, b, f, other = run.value
    assert 1000000 <= a < 1000000 + 300 * 1000 * 0.5  # little time since init
    # 2 s of a 0.5 s cycle of 100 W and 300 W: 400 J, give or take one half-period's difference
    assert 400000 - 100000 <= b - a <= 400000 + 100000
    assert b <= f <= b + 300 * 50
    assert other == 5  # no power.usage: the counter stays
