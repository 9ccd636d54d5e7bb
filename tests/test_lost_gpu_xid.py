"""A GPU that falls off the bus reports Xid 79 as it is lost (staged at the same instant: the fake
delivers it while the GPU already answers as lost, as the driver does). A real Prometheus scraping
every 15 s (a common production interval) must store that Xid, so ``increase()`` sees it: the lost
GPU keeps its Xid counters in /metrics (only its measured values go).

Run time: the Xid is staged right after Prometheus's first scrape and the test ends at the scrape after
the loss, so it takes two scrape intervals at most (~32 s with start-up; deadline 60 s)."""

from __future__ import annotations

import time
from pathlib import Path

from tests.harness import REPO, SCENARIOS, start, value
from tests.promserver import prometheus
from tests.test_faults import rewrite, wait_for

FIXTURE = REPO / "tests" / "fixtures" / "default-counters.csv"
XID = 'gpu_xid_errors_total{gpu="2",xid="79"}'
TOTAL = 'gpu_xid_errors_all_codes_total{gpu="2"}'


def test_lost_gpus_xid_79_is_stored_by_a_15s_prometheus(fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "host.scn"
    scenario.write_text((SCENARIOS / "h100x4.scn").read_text())
    started = time.monotonic()  # before the exporter's nvmlInit, from which the fake counts its seconds
    exporter = start(fakenvml_dir, scenario, tmp_path, "--collect-interval", "1s")
    try:
        with prometheus(tmp_path, exporter.port, "15s") as server:
            server.wait(TOTAL, lambda result: len(result) == 1, timeout=30)  # first scrape: 0, pre-created
            due = time.monotonic() - started + 1.0  # in the fake's seconds: at most 1 s from now
            extra = f"gpu2.xid = 79@{due:.1f}\ngpu2.lost_after = {due:.1f}\n"  # the same instant
            rewrite(scenario, scenario.read_text() + extra)
            lost = wait_for(
                exporter,
                lambda p: value(p, "gpu_up", gpu="2") == 0 and value(p, "gpu_xid_errors_total", gpu="2", xid="79") == 1,
            )
            assert value(lost, "gpu_xid_errors_total", gpu="2", xid="79") == 1  # kept while lost
            assert value(lost, "gpu_power_watts", gpu="2") is None  # its measured values go
            server.wait('gpu_up{gpu="2"} == 0', lambda result: len(result) == 1, timeout=30)  # a scrape after the loss
            increase = server.query(f"increase({TOTAL}[1m])")
            assert increase and float(increase[0]["value"][1]) > 0, increase  # type: ignore[index]
            # the shipped rules' arm for a code whose series is new while the GPU's total was 0 in the window
            alert = server.query(f"{XID} > 0 and on (job, instance, gpu, uuid) min_over_time({TOTAL}[10m]) == 0")
            assert len(alert) == 1, alert
    finally:
        exporter.stop()


def test_lost_gpu_keeps_its_xid_in_dcgm_exporter_mode(fakenvml_dir: Path, tmp_path: Path) -> None:
    """With ``-f``, DCGM_FI_DEV_XID_ERRORS (the last Xid, 79, due at the instant of the loss) stays for
    the lost GPU; its other fields go. A few seconds."""
    scenario = tmp_path / "host.scn"
    scenario.write_text((SCENARIOS / "h100x4.scn").read_text() + "gpu2.xid = 79@1\ngpu2.lost_after = 1\n")
    exporter = start(fakenvml_dir, scenario, tmp_path, "-f", str(FIXTURE), "-c", "200")
    try:
        lost = wait_for(
            exporter,
            lambda p: (
                value(p, "gpu_exporter_device_down", gpu="2") == 1 and value(p, "DCGM_FI_DEV_XID_ERRORS", gpu="2")
            ),
        )
    finally:
        exporter.stop()
    assert value(lost, "DCGM_FI_DEV_XID_ERRORS", gpu="2") == 79
    assert value(lost, "DCGM_FI_DEV_GPU_TEMP", gpu="2") is None
    assert value(lost, "DCGM_FI_DEV_GPU_TEMP", gpu="1") is not None
