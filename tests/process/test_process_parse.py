"""Malformed /proc entries, out of process on the fake NVML with a fake procfs tree: one process's
bad ``Uid:`` line (a superscript digit, which ``str.isdigit`` accepts and ``int`` refuses) costs that
process its user name, never the GPU's other series."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.harness import SCENARIOS, samples, start, value
from tests.process.test_processes import PROCESSES, procfs


def test_a_malformed_uid_line_costs_only_its_process_the_user(fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "host.scn"
    scenario.write_text((SCENARIOS / "h100x4.scn").read_text() + PROCESSES)
    root = procfs(tmp_path / "proc")
    (root / "4444" / "status").write_text("Name:\tbad\nUid:\t\u00b2\t\u00b2\t\u00b2\t\u00b2\n")
    exporter = start(fakenvml_dir, scenario, tmp_path, "--collect-interval", "1h", "--path.procfs", str(root))
    try:
        parsed = samples(exporter.metrics())
    finally:
        exporter.stop()
    gpu0 = {"gpu": "0", "uuid": "GPU-4a1e0c2d-0b7f-4c3a-9e21-5d8f6a0b1c00"}
    assert value(parsed, "gpu_temperature_celsius", **gpu0) is not None  # the GPU's own series stay
    assert value(parsed, "gpu_process_memory_used_bytes", **gpu0, pid="4242", process="python3", user="root")
    bad = value(parsed, "gpu_process_memory_used_bytes", **gpu0, pid="4444", user="")
    assert bad == 2 * 1024**3  # the process is still counted, with no user


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_crowded_hpc_job_directory_is_scanned_once_a_second(fakenvml_dir: Path, tmp_path: Path) -> None:
    """20,000 job files and 4 GPUs sampled every 200 ms: scanned by every GPU every cycle this held
    most of a core; scanned once a second it costs little."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "0").write_text("job-77\n")
    for n in range(20000):
        (jobs / f"{n + 100}.{n % 7}").write_text(f"job-{n}\n")
    exporter = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "--collect-interval", "200ms",
                     "--hpc-job-mapping-dir", str(jobs))  # fmt: skip
    try:
        pid = exporter.process.pid
        deadline = time.monotonic() + 30
        while 'hpc_job="job-77"' not in exporter.metrics():  # the mapping is read
            assert time.monotonic() < deadline, "GPU 0's job never showed"
            time.sleep(0.1)
        used, began = _cpu_seconds(pid), time.monotonic()
        while time.monotonic() - began < 4:  # a 4 s window of 200 ms cycles, scraped once a second
            exporter.metrics()
            time.sleep(1)
        share = (_cpu_seconds(pid) - used) / (time.monotonic() - began)
        assert share < 0.4, share
    finally:
        exporter.stop()
