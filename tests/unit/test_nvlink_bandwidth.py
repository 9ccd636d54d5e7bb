"""The unit-tier tests of tests/process/test_nvlink_bandwidth.py (split by what they start)."""

from __future__ import annotations

from gpu_exporter import model
from gpu_exporter.compat.fields import (
    BANDWIDTH_FIELDS,
    BANDWIDTH_LINKS,
    BANDWIDTH_TOTAL,
    BYTES_PER_SECOND_FIELDS,
    NvlinkBandwidth,
)


def test_a_counter_reset_gives_zero_and_fields_map_to_links() -> None:
    gpu, link = model.gpu(0, "GPU-0"), model.nvlink(0, "GPU-0", 0)
    bandwidth = NvlinkBandwidth()
    kib = 1024.0  # bytes per KiB
    for at, total_kib, want in ((10.0, 0, 0.0), (12.0, 8000, 4.0), (14.0, 100, 0.0), (15.0, 2100, 2.0)):
        key = "gpu_nvlink_transmit_bytes_total"
        bandwidth.update("GPU-0", gpu, {gpu: {}, link: {key: total_kib * kib}}, at)
        assert bandwidth.value("GPU-0", 0) == want
        assert bandwidth.value("GPU-0", None) == want
    assert BANDWIDTH_FIELDS[BANDWIDTH_TOTAL] is None
    assert [BANDWIDTH_FIELDS[number] for number in (440, 445, 475, 480, 446, 448, 494, 496)] == [
        0, 5, 6, 11, 12, 14, 15, 17
    ]  # fmt: skip
    assert len(BANDWIDTH_LINKS) == 18


def test_bytes_per_second_is_the_same_rate_times_1024() -> None:
    """DCGM 4.7's 1648 and 1630 + n (dcgm-exporter 4.9's name for the total): KiB/s × 1024, truncated, where
    449 and its per-link fields are KiB/s ÷ 1000: 8000 KiB in 2 s is 4 MB/s and 4,096,000 bytes/s."""
    gpu, link = model.gpu(0, "GPU-0"), model.nvlink(0, "GPU-0", 3)
    bandwidth = NvlinkBandwidth()
    key = "gpu_nvlink_receive_bytes_total"
    for at, total_kib in ((10.0, 0.0), (12.0, 8000.0)):
        bandwidth.update("GPU-0", gpu, {gpu: {}, link: {key: total_kib * 1024}}, at)
    assert bandwidth.value("GPU-0", None) == 4.0
    assert bandwidth.value("GPU-0", None, per_byte=True) == 4_096_000.0
    assert bandwidth.value("GPU-0", 3, per_byte=True) == 4_096_000.0
    bandwidth.update("GPU-0", gpu, {gpu: {}, link: {key: 8333.5 * 1024}}, 15.0)  # 111.1666 KiB/s
    assert bandwidth.value("GPU-0", None) == 0.0 and bandwidth.value("GPU-0", None, per_byte=True) == 113834.0
    assert BYTES_PER_SECOND_FIELDS[1648] is None and BYTES_PER_SECOND_FIELDS[1630] == 0
    assert BYTES_PER_SECOND_FIELDS[1647] == 17
