"""The unit-tier tests of tests/process/test_nvlink_bandwidth.py (split by what they start)."""

from __future__ import annotations

from gpu_exporter import model
from gpu_exporter.compat.fields import BANDWIDTH_FIELDS, BANDWIDTH_LINKS, BANDWIDTH_TOTAL, NvlinkBandwidth


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
