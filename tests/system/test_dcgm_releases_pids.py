"""The process calls of the real adapter on NVIDIA's real DCGM bindings of 3.3.9, 4.4.2 and 4.6.0 over
the stand-in libdcgm, in process: ``dcgmWatchPidFields``, the pid lists as ``dcgmRunningProcess_t``
blobs through ``dcgmGetValuesSince_v2``, and the job statistics (``c_dcgmJobInfo_v3``). Skipped, saying
why, where the bindings are not found (tests/dcgmbindings.py)."""

from __future__ import annotations

import pytest

from gpu_exporter.backends.dcgm.adapter import DcgmError
from gpu_exporter.backends.dcgm.pidvalues import translate
from tests.dcgmfake_pids import FakeProcess
from tests.system.test_dcgm_releases import Host, host  # noqa: F401 - the per-release fixture

GIB = 1024**3
NAME = "gpu-exporter-test-pids"


def test_pid_lists_and_job_statistics_through_the_bindings(host: Host) -> None:  # noqa: F811 - the fixture
    engine = host.engine
    engine.pids.run(0, FakeProcess(7001, 8 * GIB, sm=60.0, mem=30.0), FakeProcess(7002, None, sm=20.0, graphics=True))
    host.adapter.watch_processes(NAME, [0, 1], 1_000_000, 10.0)
    assert "dcgmWatchPidFields" in host.library.calls
    since = host.adapter.process_samples(NAME, 0)[2]
    host.adapter.start_job(NAME, f"{NAME}-1")
    with pytest.raises(DcgmError) as refused:
        host.adapter.start_job(NAME, f"{NAME}-1")
    assert refused.value.code == -26  # DCGM_ST_DUPLICATE_KEY
    engine.clock_us = engine.now_us() + 3_000_000  # three engine updates
    running, samples, after = host.adapter.process_samples(NAME, since)
    assert after > since
    assert {(r.pid, r.memory, r.graphics) for r in running} == {(7001, 8 * GIB, False), (7002, None, True)}
    utilization = host.adapter.job_processes(f"{NAME}-1")
    assert {u.pid: round(u.sm, 6) for u in utilization} == {7001: 30.0, 7002: 10.0}  # ÷ every pid's samples
    table = translate(running, samples, utilization)
    assert table[0][7001].sm == pytest.approx(60.0) and table[0][7002].sm == pytest.approx(20.0)
    assert table[0][7001].mem == pytest.approx(30.0) and table[0][7002].memory is None
    assert 1 not in table  # nothing runs on GPU 1
    host.adapter.remove_job(f"{NAME}-1")
    host.adapter.remove_job(f"{NAME}-1")  # an unknown job is ignored
    with pytest.raises(DcgmError) as unknown:
        host.adapter.job_processes(f"{NAME}-1")
    assert unknown.value.code == -14  # DCGM_ST_NO_DATA
    host.adapter.unwatch(NAME)
