"""Processes on the DCGM backend: the translation of one window (pid lists, SM sample count, job
statistics) into each process's values, the fake engine's job-statistics rule, and the backend on the
in-process fake through the real Sampler: the same process series as on NVML, a failing job call
counted without stalling anything, the watch and jobs removed on close."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpu_exporter.backends.dcgm.pidvalues import PidUtilization, RunningProcess, translate
from tests.dcgmfake import FakeDcgm, from_scenario
from tests.dcgmfake_pids import FakeProcess, PidEngine
from tests.harness import SCENARIOS, value
from tests.unit.test_dcgm_backend import ALL, Run

GIB = 1024**3
PROCESSES = """
gpu0.process.0.pid = 7001
gpu0.process.0.used_memory = 8589934592
gpu0.process.0.sm_util = 60
gpu0.process.0.mem_util = 30
gpu0.process.1.pid = 7002
gpu0.process.1.used_memory = 2147483648
gpu0.process.1.sm_util = 20
gpu1.process.0.pid = 7101
gpu1.process.0.sm_util = 50
gpu1.process.0.graphics = 1
"""
GPU0 = {"gpu": "0"}


# the translation ----------------------------------------------------------------------------
def test_sm_shares_are_undone_from_dcgms_all_samples_average() -> None:
    """Two pids on one GPU over 3 updates: DCGM's smUtil divides each pid's sum by all 6 samples (30
    and 10 for 60 % and 20 %); the process's own average is that × 6 samples ÷ 3 updates."""
    running = [RunningProcess(0, ts, pid, mem) for ts in (1, 2, 3) for pid, mem in ((7001, 8 * GIB), (7002, GIB))]
    got = translate(running, {0: 6}, [PidUtilization(0, 7001, 30.0, 15.0), PidUtilization(0, 7002, 10.0, 0.0)])
    assert got[0][7001].sm == pytest.approx(60.0) and got[0][7001].mem == pytest.approx(30.0)
    assert got[0][7002].sm == pytest.approx(20.0)
    assert got[0][7001].memory == 8 * GIB and got[0][7002].memory == GIB


def test_only_the_newest_list_runs_and_unknowns_stay_absent() -> None:
    """A pid of an earlier update only has ended; a pid the job does not name has no utilization;
    memory DCGM could not read is absent; a pid listed as compute and graphics keeps the larger memory."""
    running = [
        RunningProcess(0, 1, 5, 100),
        RunningProcess(0, 2, 6, None),
        RunningProcess(0, 2, 7, 10),
        RunningProcess(0, 2, 7, 50, graphics=True),
    ]
    got = translate(running, {0: 4}, [PidUtilization(0, 5, 40.0, 0.0), PidUtilization(0, 7, 10.0, 0.0)])
    assert sorted(got[0]) == [6, 7]
    assert got[0][6].memory is None and got[0][6].sm is None
    assert got[0][7].memory == 50 and got[0][7].sm == pytest.approx(10.0 * 4 / 2)


def test_no_list_no_processes() -> None:
    assert translate([], {0: 3}, [PidUtilization(0, 5, 40.0, 0.0)]) == {}


# the fake engine's rule ---------------------------------------------------------------------
def test_fake_job_stats_divide_each_pid_by_all_samples_of_the_window() -> None:
    engine = PidEngine()
    engine.run(0, FakeProcess(1, 10, sm=60.0), FakeProcess(2, 20, sm=20.0))
    engine.watch("g", (0,), 1_000_000, 60.0)
    engine.advance(10_000_000)
    engine.start_job("g", "j", 10_000_001)
    stats = {u.pid: u.sm for u in engine.job_processes("j", 14_000_000)}
    assert stats == {1: pytest.approx(30.0), 2: pytest.approx(10.0)}  # 4 updates × 2 samples each
    running, counts, after = engine.samples("g", 10_500_000, 14_000_000)
    assert counts == {0: 8} and {r.ts for r in running} == {11_000_000, 12_000_000, 13_000_000, 14_000_000}
    assert after == 14_000_001


# the backend on the fake --------------------------------------------------------------------
@pytest.fixture
def run() -> Iterator[Run]:
    fake = from_scenario((SCENARIOS / "h100x4.scn").read_text() + PROCESSES)
    started = Run(fake, ALL, interval=1.0)
    yield started
    started.sampler.stop()


def _cycle(run: Run) -> dict[str, dict[frozenset[tuple[str, str]], float]]:
    run.fake.clock_us = run.fake.now_us() + 1_000_000  # the engine's own clock moves one interval
    return run.cycle(1.0)


def test_processes_with_memory_and_sm_shares_as_on_nvml(run: Run) -> None:
    parsed = _cycle(run)
    for _ in range(3):  # the watch, the first window, then a table the GPU reads copy
        parsed = _cycle(run)
    assert value(parsed, "gpu_process_memory_used_bytes", **GPU0, pid="7001") == 8 * GIB
    assert value(parsed, "gpu_process_memory_used_bytes", **GPU0, pid="7002") == 2 * GIB
    assert value(parsed, "gpu_process_sm_utilization_ratio", **GPU0, pid="7001") == pytest.approx(0.6)
    assert value(parsed, "gpu_process_sm_utilization_ratio", **GPU0, pid="7002") == pytest.approx(0.2)
    assert value(parsed, "gpu_process_memory_utilization_ratio", **GPU0, pid="7001") == pytest.approx(0.3)
    assert value(parsed, "gpu_processes", **GPU0, pid="7001") == 1
    # a graphics process without memory: listed, utilization known, no memory series
    assert value(parsed, "gpu_process_sm_utilization_ratio", gpu="1", pid="7101") == pytest.approx(0.5)
    assert value(parsed, "gpu_process_memory_used_bytes", gpu="1", pid="7101") is None
    assert value(parsed, "gpu_processes", gpu="2") is None


def test_a_process_that_ends_goes_and_a_new_one_comes(run: Run) -> None:
    for _ in range(4):
        _cycle(run)
    run.fake.pids.run(0, FakeProcess(7003, GIB, sm=40.0))
    for _ in range(2):
        parsed = _cycle(run)
    assert value(parsed, "gpu_process_sm_utilization_ratio", **GPU0, pid="7003") == pytest.approx(0.4)
    assert value(parsed, "gpu_processes", **GPU0, pid="7001") is None


def test_failing_job_calls_are_counted_and_the_gpus_keep_reading(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    for _ in range(4):
        _cycle(run)

    def refuse(job_id: str, now_us: int) -> list[PidUtilization]:
        from gpu_exporter.backends.dcgm.errors import dcgm_error

        raise dcgm_error(-3, "dcgmJobGetStats: generic error")

    monkeypatch.setattr(run.fake.pids, "job_lists", refuse)
    parsed = _cycle(run)
    errors = parsed["gpu_exporter_sample_errors_total"]
    assert any(dict(labels).get("kind") == "generic_error" for labels in errors)
    assert value(parsed, "gpu_temperature_celsius", **GPU0) is not None
    assert not run.fake.pids.watches and not run.fake.pids.jobs  # dropped, set up again after a while


def test_close_removes_the_watch_and_the_job(run: Run) -> None:
    for _ in range(3):
        _cycle(run)
    fake: FakeDcgm = run.fake
    assert fake.pids.watches and len(fake.pids.jobs) == 1
    run.backend.close()
    assert not fake.pids.jobs
