"""DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL and _L<n> on the NVML backend, in dcgm-exporter mode: DCGM's
rate, Δ(RX + TX KiB of NVML's NVLink throughput counters) ÷ seconds between samples ÷ 1000,
truncated, 0 at the first sample; a counter reset gives 0, never a negative value."""

from __future__ import annotations

import math
import time
from pathlib import Path

from tests.harness import REPO, SCENARIOS, Exporter, samples, start, value
from tests.process.test_faults import wait_for

STEP = 10_000_000  # KiB that link 0's TX counter grows per step (RX grows twice as much)
PERIOD = 1  # seconds per step of the scenario's cycle
INTERVAL = 2  # the collect interval: at least one step between two samples
CSV = """\
DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, gauge, NVLink bandwidth over all links.
DCGM_FI_DEV_NVLINK_BANDWIDTH_L0, gauge, NVLink bandwidth of link 0.
DCGM_FI_DEV_NVLINK_BANDWIDTH_L1, gauge, NVLink bandwidth of link 1.
DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND, gauge, NVLink throughput over all links (bytes/s).
DCGM_FI_DEV_NVLINK_THROUGHPUT_L0_BYTES_PER_SECOND, gauge, NVLink throughput of link 0 (bytes/s).
"""


def _scenario(tmp_path: Path) -> Path:
    cycle = lambda step: ",".join(str(i * step) for i in range(120)) + f"@{PERIOD}"  # noqa: E731 - one-line helper
    text = (SCENARIOS / "h100x4.scn").read_text()
    text += f"gpu0.nvlink.0.tx = {cycle(STEP)}\ngpu0.nvlink.0.rx = {cycle(2 * STEP)}\n"
    path = tmp_path / "bandwidth.scn"
    path.write_text(text)
    return path


def _scrape(exporter: Exporter, after: float | None) -> tuple[float, dict[str, float | None]]:
    """The next frame's sample time and its bandwidth values of GPU 0 (waits for a newer frame)."""
    for _ in range(100):
        parsed = samples(exporter.metrics())
        at = value(parsed, "gpu_exporter_last_sample_timestamp_seconds")
        if at is not None and (after is None or at > after):
            names = ("TOTAL", "L0", "L1")
            found = {name: value(parsed, f"DCGM_FI_DEV_NVLINK_BANDWIDTH_{name}", gpu="0") for name in names}
            for name, link in (("BYTES", ""), ("L0_BYTES", "L0_")):
                found[name] = value(parsed, f"DCGM_FI_DEV_NVLINK_THROUGHPUT_{link}BYTES_PER_SECOND", gpu="0")
            return at, found
        time.sleep(0.1)
    raise AssertionError("no new frame in 10 s")


def test_bandwidth_is_dcgms_rate_between_two_samples(fakenvml_dir: Path, tmp_path: Path) -> None:
    csv = tmp_path / "bandwidth.csv"
    csv.write_text(CSV)
    exporter = start(
        fakenvml_dir, _scenario(tmp_path), tmp_path, "-f", str(csv), "--collector.nvlink",
        "--collect-interval", f"{INTERVAL}s", wait_for="/readyz",
    )  # fmt: skip
    try:
        first_at, first = _scrape(exporter, None)
        second_at, second = _scrape(exporter, first_at)
        text = exporter.metrics()
    finally:
        exporter.stop()
    assert first == {"TOTAL": 0.0, "L0": 0.0, "L1": 0.0, "BYTES": 0.0, "L0_BYTES": 0.0}, first  # DCGM: 0 at first
    seconds = second_at - first_at
    per_step = 3 * STEP  # KiB of TX + RX per step of the cycle
    got = second["L0"]
    assert got is not None
    steps = round(got * 1000 * seconds / per_step)  # how many steps of the cycle lay between the reads
    assert steps >= 1, (got, seconds)
    want = math.trunc(steps * per_step / seconds / 1000)
    assert abs(got - want) <= 1, (got, want, seconds)  # the timestamp is taken a moment after the frame's time
    assert second["L1"] == 0.0  # link 1's counters do not move
    assert second["TOTAL"] == got + second["L1"]
    # DCGM 4.7's bytes-per-second twins (4.9's name for the total): the same KiB/s rate × 1024, truncated
    in_bytes = second["BYTES"]
    assert in_bytes is not None and in_bytes == second["L0_BYTES"]
    want_bytes = math.trunc(steps * per_step / seconds * 1024)
    assert abs(in_bytes - want_bytes) <= 1024 * 1000, (in_bytes, want_bytes)  # as MB/s's ±1 above
    assert abs(in_bytes / 1024 / 1000 - got) < 1  # MB/s is KiB/s ÷ 1000, bytes/s KiB/s × 1024, both truncated
    assert 'DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{gpu="1",' in text  # every GPU with NVLink counters


BANDWIDTH = "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"  # a counter in the default CSV: the parser adds _total


def test_default_counters_serve_nvlink_fields_without_the_collector_flag(fakenvml_dir: Path, tmp_path: Path) -> None:
    """dcgm-exporter's default counters list DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL: the counters file
    turns on the nvlink collector it is read through (no --collector.nvlink), every GPU has the series
    (0 on GPUs without NVLink counters, as DCGM), and the CRC flit total is served too. A few seconds."""
    csv = tmp_path / "nvlink.csv"
    csv.write_text(
        (REPO / "tests" / "fixtures" / "default-counters.csv").read_text()
        + "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, counter, Total number of NVLink flow-control CRC errors.\n"
    )
    exporter = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "-f", str(csv), "-c", "200")
    try:  # the first frames may precede the first NVLink read
        parsed = wait_for(exporter, lambda p: len(p.get(f"{BANDWIDTH}_total", {})) == 4)
    finally:
        exporter.stop()
    total = {dict(labels)["gpu"]: v for labels, v in parsed[f"{BANDWIDTH}_total"].items()}
    assert total == {"0": 0.0, "1": 0.0, "2": 0.0, "3": 0.0}  # GPUs 2 and 3 have no NVLink counters: 0
    assert value(parsed, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL_total", gpu="0") == 3  # the scenario's
    assert "NVLINK" not in "".join(line for line in exporter.log().splitlines() if "skipped" in line)
    assert "turn on the nvlink collector" in exporter.log()
