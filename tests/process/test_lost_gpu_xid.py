"""A GPU that falls off the bus reports Xid 79 as it is lost (staged at the same instant: the fake
delivers it while the GPU already answers as lost, as the driver does). A real Prometheus scraping
every 15 s (a common production interval) must store that Xid, so ``increase()`` sees it: the lost
GPU keeps its Xid counters in /metrics (only its measured values go).

Run time: the Xid is staged right after Prometheus's first scrape and the test ends at the scrape after
the loss, so it takes two scrape intervals at most (~32 s with start-up; deadline 60 s)."""

from __future__ import annotations

from pathlib import Path

from tests.harness import REPO, SCENARIOS, start, value
from tests.process.test_faults import wait_for

FIXTURE = REPO / "tests" / "fixtures" / "default-counters.csv"
XID = 'gpu_xid_errors_total{gpu="2",xid="79"}'
TOTAL = 'gpu_xid_errors_all_codes_total{gpu="2"}'


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
