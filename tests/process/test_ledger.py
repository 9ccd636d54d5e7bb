"""The ledger out of process on the fake NVML: two Slurm jobs (found from their processes' cgroup
paths) share GPU 0 at SM shares of 60 % and 20 % (the GPU 97 % busy), one job holds GPU 1 alone.
The shared GPU's busy time goes 3:1 to the jobs, the rest unattributed, and the parts add up to the
GPU's busy time and energy; the exclusive job gets the whole GPU; an HPC job that leaves is
forgotten after the retention, not before. (The split itself is proven exactly, on a fake clock, in
tests/unit/test_stage_ledger.py.)"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.harness import SCENARIOS, Labels, scrape_until, start, value

GIB = 1024**3
GPU0 = {"gpu": "0", "uuid": "GPU-4a1e0c2d-0b7f-4c3a-9e21-5d8f6a0b1c00"}
GPU1 = {"gpu": "1", "uuid": "GPU-4a1e0c2d-1b7f-4c3a-9e21-5d8f6a0b1c11"}
PROCESSES = """
gpu0.process.0.pid = 7001
gpu0.process.0.used_memory = 8589934592
gpu0.process.0.sm_util = 60
gpu0.process.1.pid = 7002
gpu0.process.1.used_memory = 2147483648
gpu0.process.1.sm_util = 20
gpu1.process.0.pid = 7101
gpu1.process.0.used_memory = 4294967296
gpu1.process.0.sm_util = 50
"""
JOBS = {7001: "101", 7002: "202", 7101: "303"}


def _procfs(root: Path) -> Path:
    for pid, job in JOBS.items():
        entry = root / str(pid)
        entry.mkdir(parents=True)
        (entry / "cgroup").write_text(f"0::/system.slice/slurmstepd.scope/job_{job}/step_0/user/task_0\n")
        (entry / "comm").write_text("python3\n")
        (entry / "status").write_text("Name:\tpython3\nUid:\t0\t0\t0\t0\n")
        (entry / "stat").write_text(f"{pid} (python3) S " + " ".join(["1"] * 19) + " 123456 0 0\n")
    return root


def _get(parsed: dict[str, dict[Labels, float]], name: str, **labels: str) -> float:
    found = value(parsed, name, **labels)
    assert found is not None, (name, labels)
    return found


def test_two_slurm_jobs_split_a_shared_gpu_by_their_sm_shares(fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "host.scn"
    scenario.write_text((SCENARIOS / "h100x4.scn").read_text() + PROCESSES)
    exporter = start(
        fakenvml_dir,
        scenario,
        tmp_path,
        "--collect-interval",
        "200ms",
        "--path.procfs",
        str(_procfs(tmp_path / "p")),
        "--metrics.detail",
        "full",  # SM-seconds too
    )
    try:
        first = scrape_until(
            exporter, lambda p: (value(p, "gpu_allocation_busy_seconds_total", slurm_job="202") or 0) > 0
        )
        later = scrape_until(
            exporter, lambda p: (value(p, "gpu_allocation_busy_seconds_total", slurm_job="202") or 0) > 1.0
        )
    finally:
        exporter.stop()
    a = _get(later, "gpu_allocation_busy_seconds_total", **GPU0, slurm_job="101")
    b = _get(later, "gpu_allocation_busy_seconds_total", **GPU0, slurm_job="202")
    rest = _get(later, "gpu_unattributed_busy_seconds_total", **GPU0)
    busy = _get(later, "gpu_utilization_seconds_total", **GPU0)
    assert a / b == pytest.approx(3.0, rel=0.01)
    assert a + b + rest == pytest.approx(busy, rel=0.01)
    assert rest / busy == pytest.approx(0.17 / 0.97, abs=0.05)  # what no process sample explains
    energies = []
    for parsed in (first, later):
        parts = [_get(parsed, "gpu_allocation_energy_joules_total", **GPU0, slurm_job=job) for job in ("101", "202")]
        energies.append((sum(parts) + _get(parsed, "gpu_unattributed_energy_joules_total", **GPU0), parts))
    device = _get(later, "gpu_energy_joules_total", **GPU0) - _get(first, "gpu_energy_joules_total", **GPU0)
    assert energies[1][0] - energies[0][0] == pytest.approx(device, rel=0.01)
    assert energies[1][1][0] > energies[1][1][1]  # the busier job used more energy
    assert _get(later, "gpu_allocation_memory_used_bytes", **GPU0, slurm_job="101") == 8 * GIB
    assert _get(later, "gpu_allocation_gpu_seconds_total", **GPU0, slurm_job="101") == pytest.approx(
        _get(later, "gpu_allocation_gpu_seconds_total", **GPU0, slurm_job="202")
    )
    # GPU 1 is job 303's alone: all of its busy time and energy, nothing unattributed
    alone = _get(later, "gpu_allocation_busy_seconds_total", **GPU1, slurm_job="303")
    assert alone == pytest.approx(_get(later, "gpu_utilization_seconds_total", **GPU1), rel=0.01)
    assert _get(later, "gpu_unattributed_busy_seconds_total", **GPU1) == 0
    assert _get(later, "gpu_unattributed_energy_joules_total", **GPU1) == 0
    sm = _get(later, "gpu_allocation_sm_seconds_total", **GPU1, slurm_job="303")
    assert sm == pytest.approx(0.5 * _get(later, "gpu_allocation_gpu_seconds_total", **GPU1, slurm_job="303"))


def test_a_vanished_allocation_is_forgotten_after_the_retention(fakenvml_dir: Path, tmp_path: Path) -> None:
    """HPC job hpc-1 leaves GPU 0 and comes back: within the retention its counters go on where they
    were; after it, they start again from nothing (the job's state is not kept for ever)."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    mapping = jobs / "0"
    mapping.write_text("hpc-1\n")
    retention = 5.0
    exporter = start(
        fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "--collect-interval", "200ms",
        "--hpc-job-mapping-dir", str(jobs), "--gpu.vanished-retention", f"{retention:g}s",
    )  # fmt: skip

    def seconds(parsed: dict[str, dict[Labels, float]]) -> float | None:
        return value(parsed, "gpu_allocation_gpu_seconds_total", **GPU0, hpc_job="hpc-1")

    try:
        held = seconds(scrape_until(exporter, lambda p: (seconds(p) or 0) > 1.0))
        assert held is not None
        mapping.unlink()
        scrape_until(exporter, lambda p: seconds(p) is None)
        mapping.write_text("hpc-1\n")  # back within the retention: the counter goes on
        again = seconds(scrape_until(exporter, lambda p: seconds(p) is not None))
        assert again is not None and again >= held
        mapping.unlink()
        scrape_until(exporter, lambda p: seconds(p) is None)
        left = time.monotonic()
        scrape_until(exporter, lambda p: time.monotonic() - left > retention + 1.0, timeout=retention + 5)
        mapping.write_text("hpc-1\n")  # back after the retention: forgotten, so it starts afresh
        fresh = seconds(scrape_until(exporter, lambda p: seconds(p) is not None))
        assert fresh is not None and fresh < 1.0 <= again
    finally:
        exporter.stop()


def test_peak_memory_from_nvml_accounting_where_it_is_on(fakenvml_dir: Path, tmp_path: Path) -> None:
    """GPU 0 has accounting mode on (job 101's process peaked at 12 GiB; job 202's gives no maximum, so its
    memory now): each job's peak is its process's maximum since it started, beside the memory it holds
    now; GPU 1 has it off: job 303 has only the memory at the read, and the status API says the peak is
    not supported there."""
    scenario = tmp_path / "host.scn"
    accounting = "gpu0.accounting_mode = 1\ngpu0.process.0.max_memory = 12884901888\ngpu1.accounting_mode = 0\n"
    scenario.write_text((SCENARIOS / "h100x4.scn").read_text() + PROCESSES + accounting)
    exporter = start(fakenvml_dir, scenario, tmp_path, "--collect-interval", "200ms",
                     "--path.procfs", str(_procfs(tmp_path / "p")))  # fmt: skip
    try:
        parsed = scrape_until(
            exporter, lambda p: value(p, "gpu_allocation_memory_used_bytes", slurm_job="303") == 4 * GIB
        )
        status = exporter.get("/api/v1/status").json()
    finally:
        exporter.stop()
    assert _get(parsed, "gpu_allocation_memory_peak_bytes", **GPU0, slurm_job="101") == 12 * GIB
    assert _get(parsed, "gpu_allocation_memory_peak_bytes", **GPU0, slurm_job="202") == 2 * GIB  # its memory now
    assert _get(parsed, "gpu_allocation_memory_used_bytes", **GPU0, slurm_job="101") == 8 * GIB
    assert value(parsed, "gpu_allocation_memory_peak_bytes", **GPU1, slurm_job="303") is None
    assert "gpu_process_memory_peak_bytes" not in parsed  # full detail only
    cards = {card["uuid"]: card for card in status["gpus"]}
    assert any("gpu_process_memory_peak_bytes" in lack for lack in cards[GPU1["uuid"]]["unsupported"]), cards
    assert not any("peak" in lack for lack in cards[GPU0["uuid"]]["unsupported"])
