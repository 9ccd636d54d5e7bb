"""NVLink5 port counters, FEC history, the NVLink data ECC total and the GPU's C2C link, out of process
on the fake NVML (field values only, in the GPU's one field-value call): the native per-link
gpu_nvlink_port_* / gpu_nvlink_fec_history_total counters and the gpu_c2c_* rows, and in dcgm-exporter
mode DCGM's GPU fields: 1200-1214, 1219 and 1404-1419 as the sum over the links (DCGM asks NVML's
aggregate), 498/499 as link 0's DL counters (DCGM asks scopeId 0), 285-287, 1400-1403 and 1220 as DCGM
stores them (INT64, MB/s). A GPU whose NVML answers NOT_SUPPORTED has none of them (never 0)."""

from __future__ import annotations

from pathlib import Path

from tests.harness import SCENARIOS, samples, start, value

CSV = """\
DCGM_FI_DEV_NVLINK_TX_PACKET_TOTAL, gauge, Tx packets.
DCGM_FI_DEV_NVLINK_COUNT_RX_BYTES, gauge, Rx bytes (the other spelling).
DCGM_FI_DEV_NVLINK_RX_SYMBOL_ERROR_TOTAL, gauge, Symbol errors.
DCGM_FI_DEV_NVLINK_RECOVERY_FAILED_TOTAL, gauge, Failed recoveries.
DCGM_FI_DEV_NVLINK_EFFECTIVE_ERROR_TOTAL, gauge, Effective errors.
DCGM_FI_DEV_NVLINK_COUNT_FEC_HISTORY_0, gauge, FEC bin 0.
DCGM_FI_DEV_NVLINK_FEC_HISTORY_15_TOTAL, gauge, FEC bin 15.
DCGM_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_TOTAL, gauge, NVLink ECC.
DCGM_FI_DEV_NVLINK_ERROR_DL_RECOVERY, gauge, DL recovery.
DCGM_FI_DEV_NVLINK_ERROR_DL_REPLAY, gauge, DL replay.
DCGM_FI_DEV_C2C_LINK_COUNT, gauge, C2C links.
DCGM_FI_DEV_C2C_LINK_STATUS, gauge, C2C status.
DCGM_FI_DEV_C2C_MAX_BANDWIDTH, gauge, C2C MB/s.
DCGM_FI_DEV_C2C_LINK_ERROR_INTR, gauge, C2C CRC.
DCGM_FI_DEV_C2C_LINK_ERROR_REPLAY, gauge, C2C replay.
DCGM_FI_DEV_C2C_LINK_ERROR_REPLAY_B2B, gauge, C2C b2b.
DCGM_FI_DEV_C2C_LINK_POWER_STATE, gauge, C2C power.
DCGM_FI_DEV_NVLINK_REPLAY_ERROR_PER_LINK_TOTAL, gauge, Replays per link.
DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_PER_LINK_TOTAL, gauge, CRC data errors per link.
DCGM_FI_DEV_NVLINK_THROUGHPUT_PER_LINK, gauge, Bandwidth per link.
DCGM_FI_DRIVER_VERSION, label, Driver (a global field: on link series too).
DCGM_FI_DEV_SERIAL, label, Serial (a GPU field: not on link series).
DCGM_FI_DEV_NVLINK_GET_STATE, gauge, The raw link state per link.
DCGM_FI_DEV_NVLINK_SYMBOL_BER_RAW, gauge, Symbol BER (NVML's encoding).
DCGM_FI_DEV_NVLINK_SYMBOL_BER_RATIO, gauge, Symbol BER (decoded).
DCGM_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER, gauge, Effective BER (NVML's encoding).
DCGM_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER_FLOAT, gauge, Effective BER (decoded).
DCGM_FI_DEV_NVLINK_TX_THROUGHPUT_PER_LINK, gauge, TX bandwidth per link.
DCGM_FI_DEV_NVLINK_RX_THROUGHPUT_PER_LINK, gauge, RX bandwidth per link.
DCGM_FI_DEV_GPU_NVLINK_ERRORS, gauge, Not served (DCGM stores nothing).
"""


def test_native_nvlink5_and_c2c(fakenvml_dir: Path, tmp_path: Path) -> None:
    exporter = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "--collector.nvlink", "--collect-interval", "1h")
    try:
        parsed = samples(exporter.metrics())
    finally:
        exporter.stop()
    packets = {link: value(parsed, "gpu_nvlink_port_transmit_packets_total", gpu="0", nvlink=link) for link in "01"}
    assert packets == {"0": 1000001.0, "1": 3.0}
    assert value(parsed, "gpu_nvlink_port_receive_bytes_total", gpu="0", nvlink="0") == 128000128
    assert value(parsed, "gpu_nvlink_port_errors_total", gpu="0", nvlink="0", type="receive_remote") == 4
    assert value(parsed, "gpu_nvlink_port_errors_total", gpu="0", nvlink="1", type="symbol") is None
    assert value(parsed, "gpu_nvlink_port_recoveries_total", gpu="0", nvlink="0", result="failed") == 1
    assert value(parsed, "gpu_nvlink_fec_history_total", gpu="0", nvlink="0", bin="1") == 90
    assert value(parsed, "gpu_nvlink_fec_history_total", gpu="0", nvlink="0", bin="3") is None
    # GPU 1's links and C2C answer NOT_SUPPORTED: nothing, never a 0
    assert value(parsed, "gpu_nvlink_port_transmit_packets_total", gpu="1", nvlink="0") is None
    assert value(parsed, "gpu_c2c_links", gpu="1") is None
    assert value(parsed, "gpu_nvlink_ecc_errors_total", gpu="1") is None
    assert value(parsed, "gpu_nvlink_ecc_errors_total", gpu="0") == 5  # 4 + 1 over the links
    assert value(parsed, "gpu_c2c_links", gpu="0") == 10
    assert value(parsed, "gpu_c2c_link_up", gpu="0") == 1
    assert value(parsed, "gpu_c2c_link_max_bandwidth_bytes_per_second", gpu="0") == 45e9
    assert value(parsed, "gpu_c2c_link_errors_total", gpu="0", type="replay_back_to_back") == 1
    assert value(parsed, "gpu_c2c_link_low_power", gpu="0") == 0


def test_dcgm_fields_of_nvlink5_and_c2c(fakenvml_dir: Path, tmp_path: Path) -> None:
    csv = tmp_path / "links.csv"
    csv.write_text(CSV)
    exporter = start(
        fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "-f", str(csv), "--collector.nvlink",
        "--collect-interval", "1h",
    )  # fmt: skip
    try:
        text = exporter.metrics()
        log = exporter.log()
    finally:
        exporter.stop()
    parsed = samples(text)
    assert value(parsed, "DCGM_FI_DEV_NVLINK_TX_PACKET_TOTAL", gpu="0") == 1000001 + 3  # Σ over the links
    assert value(parsed, "DCGM_FI_DEV_NVLINK_COUNT_RX_BYTES", gpu="0") == 128000128 + 320
    assert value(parsed, "DCGM_FI_DEV_NVLINK_RX_SYMBOL_ERROR_TOTAL", gpu="0") == 10
    assert value(parsed, "DCGM_FI_DEV_NVLINK_RECOVERY_FAILED_TOTAL", gpu="0") == 1
    assert value(parsed, "DCGM_FI_DEV_NVLINK_EFFECTIVE_ERROR_TOTAL", gpu="0") == 11
    assert value(parsed, "DCGM_FI_DEV_NVLINK_COUNT_FEC_HISTORY_0", gpu="0") == 900
    assert "DCGM_FI_DEV_NVLINK_FEC_HISTORY_15_TOTAL{" not in text  # no link has bin 15
    assert value(parsed, "DCGM_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_TOTAL", gpu="0") == 5
    # 498/499: link 0's DL counters (gpu0.nvlink.0.recovery_errors = 0, .replay_errors = 2)
    assert value(parsed, "DCGM_FI_DEV_NVLINK_ERROR_DL_RECOVERY", gpu="0") == 0
    assert value(parsed, "DCGM_FI_DEV_NVLINK_ERROR_DL_REPLAY", gpu="0") == 2
    assert value(parsed, "DCGM_FI_DEV_NVLINK_ERROR_DL_REPLAY", gpu="1") == 0  # gpu1.nvlink.0.replay_errors = 0
    assert value(parsed, "DCGM_FI_DEV_C2C_LINK_COUNT", gpu="0") == 10
    assert value(parsed, "DCGM_FI_DEV_C2C_LINK_STATUS", gpu="0") == 1
    assert value(parsed, "DCGM_FI_DEV_C2C_MAX_BANDWIDTH", gpu="0") == 45000  # MB/s, as DCGM stores it
    assert 'DCGM_FI_DEV_C2C_MAX_BANDWIDTH{gpu="0"' in text and "} 45000\n" in text  # an INT64: no fraction
    assert value(parsed, "DCGM_FI_DEV_C2C_LINK_ERROR_INTR", gpu="0") == 2
    assert value(parsed, "DCGM_FI_DEV_C2C_LINK_ERROR_REPLAY", gpu="0") == 3
    assert value(parsed, "DCGM_FI_DEV_C2C_LINK_ERROR_REPLAY_B2B", gpu="0") == 1
    assert value(parsed, "DCGM_FI_DEV_C2C_LINK_POWER_STATE", gpu="0") == 0
    for gpu in "123":  # NOT_SUPPORTED there: absent
        assert value(parsed, "DCGM_FI_DEV_C2C_LINK_COUNT", gpu=gpu) is None
        assert value(parsed, "DCGM_FI_DEV_NVLINK_TX_PACKET_TOTAL", gpu=gpu) is None
    # link entities as dcgm-exporter's GPU-link collector labels them, links that are up only
    link0 = (
        'DCGM_FI_DEV_NVLINK_REPLAY_ERROR_PER_LINK_TOTAL{nvlink="0",gpu="0",'
        'gpu_uuid="GPU-4a1e0c2d-0b7f-4c3a-9e21-5d8f6a0b1c00",pci_bus_id="00000000:18:00.0",device="nvidia0",'
        'model_name="NVIDIA H100 80GB HBM3",hostname="'
    )
    line = next(line for line in text.splitlines() if line.startswith(link0))
    assert line.endswith('",DCGM_FI_DRIVER_VERSION="550.54.15"} 2') and "DCGM_FI_DEV_SERIAL" not in line, line
    links = {
        (labels["gpu"], labels["nvlink"]): number
        for labels, number in (
            (dict(key), number) for key, number in parsed["DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_PER_LINK_TOTAL"].items()
        )
    }
    assert links == {("0", "0"): 0, ("0", "1"): 5, ("1", "0"): 0}  # GPU 1's link 1 is down
    assert value(parsed, "DCGM_FI_DEV_NVLINK_THROUGHPUT_PER_LINK", gpu="0", nvlink="1") == 0  # the first sample
    for name in ("DCGM_FI_DEV_NVLINK_TX_THROUGHPUT_PER_LINK", "DCGM_FI_DEV_NVLINK_RX_THROUGHPUT_PER_LINK"):
        assert value(parsed, name, gpu="0", nvlink="1") == 0  # the first sample
        assert value(parsed, name, gpu="1", nvlink="1") is None  # down
    states = {
        (dict(key)["gpu"], dict(key)["nvlink"]): number
        for key, number in parsed["DCGM_FI_DEV_NVLINK_GET_STATE"].items()
    }
    assert states == {("0", "0"): 1, ("0", "1"): 1, ("1", "0"): 1}  # NVML's raw state, links that are up
    # the GPU's bit error rates over all links: NVML's encoding as INT64 and the decoded double
    assert value(parsed, "DCGM_FI_DEV_NVLINK_SYMBOL_BER_RAW", gpu="0") == 777
    assert value(parsed, "DCGM_FI_DEV_NVLINK_SYMBOL_BER_RATIO", gpu="0") == 3e-9
    assert value(parsed, "DCGM_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER", gpu="0") == 268
    assert value(parsed, "DCGM_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER_FLOAT", gpu="0") == 1e-12
    assert value(parsed, "DCGM_FI_DEV_NVLINK_SYMBOL_BER_RAW", gpu="1") is None  # NOT_SUPPORTED: absent
    assert value(parsed, "DCGM_FI_DEV_NVLINK_SYMBOL_BER_RATIO", gpu="1") is None
    assert "DCGM_FI_DEV_GPU_NVLINK_ERRORS" not in text and "DCGM_FI_DEV_GPU_NVLINK_ERRORS skipped" in log


def test_raw_link_state_and_bit_error_rates(fakenvml_dir: Path, tmp_path: Path) -> None:
    """gpu_nvlink_state keeps NVML's 0-3 where gpu_nvlink_up says 0/1; the bit error rates are decoded."""
    scenario = tmp_path / "state.scn"
    text = (SCENARIOS / "h100x4.scn").read_text()
    assert "gpu0.nvlink.1.state = 1\n" in text
    scenario.write_text(text.replace("gpu0.nvlink.1.state = 1\n", "gpu0.nvlink.1.state = 3\n"))
    exporter = start(fakenvml_dir, scenario, tmp_path, "--collector.nvlink", "--collect-interval", "1h")
    try:
        parsed = samples(exporter.metrics())
    finally:
        exporter.stop()
    assert value(parsed, "gpu_nvlink_state", gpu="0", nvlink="1") == 3  # active, traffic disabled
    assert value(parsed, "gpu_nvlink_up", gpu="0", nvlink="1") == 1  # nvmlDeviceGetNvLinkState: enabled
    assert value(parsed, "gpu_nvlink_state", gpu="0", nvlink="0") == 1
    assert value(parsed, "gpu_nvlink_state", gpu="1", nvlink="1") == 0
    assert value(parsed, "gpu_nvlink_symbol_bit_error_ratio", gpu="0") == 3e-9  # mantissa 3, exponent 9
    assert value(parsed, "gpu_nvlink_effective_bit_error_ratio", gpu="0") == 1e-12
    for gpu in "123":  # NOT_SUPPORTED: absent, never 0
        assert value(parsed, "gpu_nvlink_symbol_bit_error_ratio", gpu=gpu) is None


def test_unsupported_link_fields_are_not_asked_again_by_their_own_call(fakenvml_dir: Path, tmp_path: Path) -> None:
    """A field-only value's own call is the same field: a NOT_SUPPORTED entry (GPU 1's links have no
    NVLink5 counters) is final, so the first cycle makes one nvmlDeviceGetFieldValues per GPU, not one
    more per link and row."""
    exporter = start(
        fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "--collector.nvlink", "--collect-interval", "1h",
        trace=True,
    )  # fmt: skip
    try:
        exporter.metrics()
        assert exporter.trace_path is not None
        lines = exporter.trace_path.read_text().splitlines()
    finally:
        exporter.stop()
    field_calls = [line for line in lines if line.startswith("nvmlDeviceGetFieldValues ")]
    assert sorted(field_calls) == [f"nvmlDeviceGetFieldValues gpu{gpu}" for gpu in range(4)], field_calls
