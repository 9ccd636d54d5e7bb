"""NVLink fabric registration (nvmlDeviceGetGpuFabricInfoV), platform placement
(nvmlDeviceGetPlatformInfo) and the auto-boost setting, out of process on the fake NVML: the native
gpu_fabric_* and gpu_auto_boost_enabled gauges and, in dcgm-exporter mode, DCGM fields 120, 170 and
173-175 (values) and 572-577 (labels and values) as DCGM stores them; a GPU whose NVML answers
NOT_SUPPORTED, or that is in no fabric, has none of them."""

from __future__ import annotations

from pathlib import Path

from tests.harness import SCENARIOS, samples, start, value

CSV = """\
DCGM_FI_DEV_FABRIC_MANAGER_STATUS, gauge, Fabric manager status.
DCGM_FI_DEV_FABRIC_CLIQUE_ID, gauge, Clique.
DCGM_FI_DEV_FABRIC_HEALTH_MASK, gauge, Health mask.
DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY, gauge, Health summary.
DCGM_FI_DEV_PLATFORM_CHASSIS_SERIAL_NUMBER, label, Chassis serial.
DCGM_FI_DEV_PLATFORM_CHASSIS_SLOT_NUMBER, gauge, Slot.
DCGM_FI_DEV_PLATFORM_TRAY_INDEX, gauge, Tray.
DCGM_FI_DEV_PLATFORM_HOST_ID, gauge, Host.
DCGM_FI_DEV_PLATFORM_PEER_TYPE, gauge, Peer type.
DCGM_FI_DEV_PLATFORM_MODULE_ID, gauge, Module.
"""


def test_native_fabric_gauges(fakenvml_dir: Path, tmp_path: Path) -> None:
    exporter = start(
        fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "--collect-interval", "1h", "--metrics.detail=full"
    )  # fmt: skip
    try:
        parsed = samples(exporter.metrics())
    finally:
        exporter.stop()
    state = {gpu: value(parsed, "gpu_fabric_state", gpu=gpu) for gpu in "0123"}
    assert state == {"0": 3.0, "1": 3.0, "2": 4.0, "3": None}  # 4: completed with NVML_ERROR_TIMEOUT; 3: no fabric
    assert value(parsed, "gpu_fabric_clique_id", gpu="0") == 32766
    assert value(parsed, "gpu_fabric_health_mask", gpu="1") == 0x51AA
    assert (value(parsed, "gpu_fabric_health", gpu="0"), value(parsed, "gpu_fabric_health", gpu="2")) == (1.0, 2.0)
    assert value(parsed, "gpu_fabric_health", gpu="3") is None


def test_dcgm_fields_of_fabric_and_placement(fakenvml_dir: Path, tmp_path: Path) -> None:
    csv = tmp_path / "fabric.csv"
    csv.write_text(CSV)
    exporter = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "-f", str(csv), "--collect-interval", "1h")
    try:
        text = exporter.metrics()
    finally:
        exporter.stop()
    parsed = samples(text)
    assert value(parsed, "DCGM_FI_DEV_FABRIC_MANAGER_STATUS", gpu="2") == 4  # DcgmFMStatusFailure
    assert value(parsed, "DCGM_FI_DEV_FABRIC_MANAGER_STATUS", gpu="3") is None
    assert value(parsed, "DCGM_FI_DEV_FABRIC_CLIQUE_ID", gpu="1") == 32766
    assert value(parsed, "DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY", gpu="2") == 2
    slot = value(
        parsed,
        "DCGM_FI_DEV_PLATFORM_CHASSIS_SLOT_NUMBER",
        gpu="0",
        DCGM_FI_DEV_PLATFORM_CHASSIS_SERIAL_NUMBER="1822124000187",
    )
    assert slot == 9
    modules = {gpu: value(parsed, "DCGM_FI_DEV_PLATFORM_MODULE_ID", gpu=gpu) for gpu in "0123"}
    assert modules == {"0": 1.0, "1": 2.0, "2": None, "3": None}  # GPUs 2 and 3: NOT_SUPPORTED
    assert value(parsed, "DCGM_FI_DEV_PLATFORM_TRAY_INDEX", gpu="1") == 4
    assert value(parsed, "DCGM_FI_DEV_PLATFORM_PEER_TYPE", gpu="0") == 2


def test_auto_boost_setting(fakenvml_dir: Path, tmp_path: Path) -> None:
    csv = tmp_path / "boost.csv"
    csv.write_text("DCGM_FI_DEV_AUTOBOOST, gauge, Auto boost.\n")
    exporter = start(
        fakenvml_dir, SCENARIOS / "old_gpu.scn", tmp_path, "--collect-interval", "1h", "--metrics.detail=full"
    )  # fmt: skip
    compat = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "-f", str(csv), "--collect-interval", "1h")
    try:
        native, dcgm = samples(exporter.metrics()), samples(compat.metrics())
    finally:
        exporter.stop()
        compat.stop()
    assert value(native, "gpu_auto_boost_enabled", gpu="0") == 1
    boost = {gpu: value(dcgm, "DCGM_FI_DEV_AUTOBOOST", gpu=gpu) for gpu in "0123"}
    assert boost == {"0": None, "1": None, "2": None, "3": 0.0}  # NOT_SUPPORTED: no sample


def test_infiniband_guid_label(fakenvml_dir: Path, tmp_path: Path) -> None:
    """DCGM 571 as DCGM prints nvmlDeviceGetPlatformInfo's ibGuid: 0x and the first 8 bytes as a
    little-endian number; an all-zero GUID (GPU 1) and no platform info (GPUs 2, 3) give an empty one."""
    csv = tmp_path / "guid.csv"
    csv.write_text(
        "DCGM_FI_DEV_PLATFORM_INFINIBAND_GUID, label, InfiniBand GUID.\n"
        "DCGM_FI_DEV_PLATFORM_MODULE_ID, gauge, Module.\n"
        "DCGM_FI_DEV_GPU_TEMP, gauge, Temperature.\n"
    )
    exporter = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "-f", str(csv), "--collect-interval", "1h")
    try:
        parsed = samples(exporter.metrics())
    finally:
        exporter.stop()
    guids = {
        dict(labels)["gpu"]: dict(labels).get("DCGM_FI_DEV_PLATFORM_INFINIBAND_GUID")
        for labels in parsed["DCGM_FI_DEV_GPU_TEMP"]
    }
    assert guids == {"0": "0x0c42a103001a2b00", "1": "", "2": "", "3": ""}  # an empty label is no label
