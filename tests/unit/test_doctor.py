"""The unit-tier tests of tests/process/test_doctor.py (split by what they start)."""

from __future__ import annotations

import os
from pathlib import Path


def test_profiling_permission_from_the_kernel_module_setting(tmp_path: Path) -> None:
    """The check itself, on a /proc tree of each kind (no DCGM here, so not through the command)."""
    from gpu_exporter.commands.doctor import Finding, profiling

    reachable, absent = Finding("DCGM", "ok", "host engine reachable"), Finding("DCGM", "skip", "not installed")
    params = tmp_path / "driver" / "nvidia" / "params"
    assert profiling(tmp_path, reachable).status == "skip"  # no params file: unknown
    params.parent.mkdir(parents=True)
    params.write_text("ResmanDebugLevel: 4294967295\nRmProfilingAdminOnly: 0\nEnableMSI: 1\n")
    assert profiling(tmp_path, reachable) == Finding("profiling", "ok", "open to every user (RmProfilingAdminOnly: 0)")
    assert profiling(tmp_path, absent).status == "skip"  # without DCGM nothing reads the counters
    params.write_text("RmProfilingAdminOnly: 1\n")
    restricted = profiling(tmp_path, reachable)
    assert restricted.status == ("ok" if os.geteuid() == 0 else "warn")
    assert "RmProfilingAdminOnly: 1" in restricted.found
