"""Process churn against the real exporter on loopback: 128 processes whose pids change every
200 ms, sampled and scraped every cycle, make ever new entities and label sets; the label caches
(families' label dicts, the exposition's label text) keep what the last few renders used, so memory
stops growing (RSS is the point here, so it is asserted as a bound)."""

from __future__ import annotations

import time
from pathlib import Path

from tests.harness import SCENARIOS, start

MIB = 1024 * 1024
PIDS = 400  # each process slot cycles through this many pids


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _churn() -> str:
    lines = []
    for gpu in range(4):
        for slot in range(32):
            base = 100_000 + (gpu * 32 + slot) * PIDS
            pids = ",".join(str(base + n) for n in range(PIDS))
            lines += [f"gpu{gpu}.process.{slot}.pid = {pids}@0.2", f"gpu{gpu}.process.{slot}.used_memory = 1048576"]
    return "\n".join(lines) + "\n"


def test_label_sets_of_churning_processes_do_not_pile_up(fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "churn.scn"
    scenario.write_text((SCENARIOS / "h100x4.scn").read_text() + _churn())
    exporter = start(fakenvml_dir, scenario, tmp_path, "--collect-interval", "200ms", "--path.procfs",
                     str(tmp_path / "no-proc"))  # fmt: skip

    def scrape_for(seconds: float) -> None:
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            assert 'pid="' in exporter.metrics()

    try:
        scrape_for(4)  # warm: every cache and the history at its working size
        before = _rss(exporter.process.pid)
        scrape_for(16)  # ~80 cycles x 128 new pids: ~10,000 new entities
        grown = _rss(exporter.process.pid) - before
        assert grown < 4 * MIB, grown
    finally:
        exporter.stop()
