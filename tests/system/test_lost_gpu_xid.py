"""The system-tier tests of tests/process/test_lost_gpu_xid.py (split by what they start)."""

from __future__ import annotations

import time
from pathlib import Path

from tests.harness import SCENARIOS, start, value
from tests.process.test_faults import rewrite, wait_for
from tests.process.test_lost_gpu_xid import TOTAL, XID
from tests.promserver import prometheus


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
