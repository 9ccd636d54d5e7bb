"""The process-tier tests of tests/system/test_kubernetes.py (split by what they start)."""

from __future__ import annotations

from pathlib import Path

from tests.harness import SCENARIOS, start, value
from tests.process.test_faults import wait_for
from tests.system.test_kubernetes import kubelet  # noqa: F401  (a fixture: pytest finds it by name)


def test_no_kubelet_is_not_fatal(fakenvml_dir: Path, tmp_path: Path) -> None:
    exporter = start(
        fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "--collect-interval", "200ms", "--kubernetes",
        "--kubernetes.pod-resources-socket", str(tmp_path / "missing.sock"), "--kubernetes.refresh-interval", "1s",
    )  # fmt: skip
    try:
        parsed = wait_for(
            exporter, lambda p: bool(value(p, "gpu_exporter_source_failures_total", kind="socket_missing"))
        )
        assert value(parsed, "gpu_exporter_source_up", source="kubelet") == 0
        assert value(parsed, "gpu_power_watts", gpu="0") == 612.345
        assert "gpu_allocation_info" not in parsed
    finally:
        exporter.stop()
