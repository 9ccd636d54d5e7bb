"""The adapter contract of the process calls (tests/unit/test_dcgm_contract.py's ``adapter`` fixture:
the fake, the real adapter over the stub bindings, and a real DCGM where one answers): a pid watch on
the GPUs, the lists since a time, jobs that start once, answer, and go; an unknown job is NO_DATA to
read and ignored to remove."""

from __future__ import annotations

import pytest

from gpu_exporter.backends.dcgm.adapter import DcgmAdapter, DcgmError
from tests.unit.test_dcgm_contract import adapter, gpus  # noqa: F401 - the fixture

NAME = "gpu-exporter-contract-pids"


def test_pid_watch_lists_and_jobs(adapter: tuple[DcgmAdapter, str | None]) -> None:  # noqa: F811 - the fixture
    dcgm, _ = adapter
    with pytest.raises(DcgmError):
        dcgm.process_samples(NAME, 0)  # nothing watched under that name yet
    dcgm.watch_processes(NAME, gpus(dcgm), 1_000_000, 10.0)
    try:
        running, samples, since = dcgm.process_samples(NAME, 0)
        assert all(r.gpu_id in gpus(dcgm) and r.pid > 0 for r in running)
        assert set(samples) <= set(gpus(dcgm)) and since >= 0
        job = f"{NAME}-1"
        dcgm.start_job(NAME, job)
        with pytest.raises(DcgmError) as duplicate:
            dcgm.start_job(NAME, job)
        assert duplicate.value.code == -26  # DCGM_ST_DUPLICATE_KEY
        assert all(u.gpu_id in gpus(dcgm) and 0 <= u.sm <= 100 for u in dcgm.job_processes(job))
        dcgm.remove_job(job)
        with pytest.raises(DcgmError) as unknown:
            dcgm.job_processes(job)
        assert unknown.value.code == -14  # DCGM_ST_NO_DATA
        dcgm.remove_job(job)  # ignored
    finally:
        dcgm.unwatch(NAME)
