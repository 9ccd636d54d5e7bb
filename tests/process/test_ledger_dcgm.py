"""The ledger out of process on the DCGM backend, on NVIDIA's real DCGM bindings of each release
(3.3.9, 4.4.2, 4.6.0) over the stand-in libdcgm (tests/dcgmstandin): the same host as
tests/process/test_ledger.py's on the fake NVML, two Slurm jobs (found from their processes' cgroup
paths) sharing GPU 0 at SM shares of 60 % and 20 % (the GPU 97 % busy) and one holding GPU 1 alone.
The processes come from DCGM's pid lists and job statistics (backends/dcgm/pidvalues.py); the
shared GPU's busy time goes 3:1 to the jobs, the rest unattributed, and the parts add up to the GPU's
busy time and energy. Skipped, saying why, where the bindings are not found (tests/dcgmbindings.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.dcgmbindings import RELEASES, bindings, process_env
from tests.harness import SCENARIOS, scrape_until, start, value
from tests.process.test_ledger import GIB, GPU0, GPU1, PROCESSES, _get, _procfs


@pytest.mark.parametrize("release", RELEASES)
def test_two_slurm_jobs_split_a_shared_gpu_by_their_sm_shares_on_dcgm(release: str, tmp_path: Path) -> None:
    bindings(release)
    scenario = tmp_path / "host.scn"
    scenario.write_text((SCENARIOS / "h100x4.scn").read_text() + PROCESSES)
    exporter = start(
        None, None, tmp_path, "--backend", "dcgm", "--collect-interval", "200ms",
        "--path.procfs", str(_procfs(tmp_path / "p")), "--metrics.detail", "full",
        env=process_env(release, scenario),
    )  # fmt: skip
    try:
        first = scrape_until(
            exporter, lambda p: (value(p, "gpu_allocation_busy_seconds_total", slurm_job="202") or 0) > 0
        )
        start_202 = value(first, "gpu_allocation_busy_seconds_total", slurm_job="202") or 0.0
        later = scrape_until(
            exporter,
            lambda p: (value(p, "gpu_allocation_busy_seconds_total", slurm_job="202") or 0) > start_202 + 1.0,
        )
    finally:
        exporter.stop()
    assert _get(later, "gpu_process_sm_utilization_ratio", **GPU0, pid="7001") == pytest.approx(0.6)
    assert _get(later, "gpu_process_memory_used_bytes", **GPU0, pid="7002") == 2 * GIB

    # Between the two scrapes: DCGM's processes appear from the second window after the start (the
    # watch, then a first window), while the GPU's busy time counts from the first read.
    def grown(name: str, **labels: str) -> float:
        return _get(later, name, **labels) - _get(first, name, **labels)

    a = grown("gpu_allocation_busy_seconds_total", **GPU0, slurm_job="101")
    b = grown("gpu_allocation_busy_seconds_total", **GPU0, slurm_job="202")
    rest = grown("gpu_unattributed_busy_seconds_total", **GPU0)
    busy = grown("gpu_utilization_seconds_total", **GPU0)
    assert a / b == pytest.approx(3.0, rel=0.01)
    assert a + b + rest == pytest.approx(busy, rel=0.01)
    assert rest / busy == pytest.approx(0.17 / 0.97, abs=0.05)  # what no process sample explains
    energies = []
    for parsed in (first, later):
        parts = [_get(parsed, "gpu_allocation_energy_joules_total", **GPU0, slurm_job=job) for job in ("101", "202")]
        energies.append((sum(parts) + _get(parsed, "gpu_unattributed_energy_joules_total", **GPU0), parts))
    device = _get(later, "gpu_energy_joules_total", **GPU0) - _get(first, "gpu_energy_joules_total", **GPU0)
    assert energies[1][0] - energies[0][0] == pytest.approx(device, rel=0.01)
    assert energies[1][1][0] / energies[1][1][1] > 1.5  # the busier job used more energy
    assert _get(later, "gpu_allocation_memory_used_bytes", **GPU0, slurm_job="101") == 8 * GIB
    # GPU 1 is job 303's alone: all of its busy time and energy, nothing unattributed
    alone = grown("gpu_allocation_busy_seconds_total", **GPU1, slurm_job="303")
    assert alone == pytest.approx(grown("gpu_utilization_seconds_total", **GPU1), rel=0.01)
    assert grown("gpu_unattributed_busy_seconds_total", **GPU1) == 0
    assert grown("gpu_unattributed_energy_joules_total", **GPU1) == 0
