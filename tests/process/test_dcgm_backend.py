"""The process-tier tests of tests/unit/test_dcgm_backend.py (split by what they start)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gpu_exporter.backends.dcgm.adapter import DCGM4_BINDINGS
from tests.harness import SCENARIOS, samples, start, value
from tests.unit.test_dcgm_backend import no_dcgm_here


def test_auto_serves_nvml_and_says_why_dcgm_was_not_used(fakenvml_dir: Path, tmp_path: Path) -> None:
    no_dcgm_here()
    empty = tmp_path / "no-bindings"
    empty.mkdir()
    exporter = start(
        fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "--backend", "auto", "--collect-interval", "1h",
        env={"DCGM_PYTHON_PATH": str(empty)},
    )  # fmt: skip
    try:
        parsed = samples(exporter.metrics())
    finally:
        exporter.stop()
    for gpu in range(4):
        assert value(parsed, "gpu_temperature_celsius", gpu=str(gpu)) is not None
    [(labels, info)] = parsed["gpu_exporter_backend_info"].items()
    labels_dict = dict(labels)
    assert info == 1 and labels_dict["backend"] == "nvml"
    assert labels_dict["reason"].startswith("auto: DCGM not available (pydcgm (dcgm_agent.py) not found in ")
    assert str(empty) in labels_dict["reason"] and DCGM4_BINDINGS in labels_dict["reason"]
    assert "not using DCGM" in exporter.log() and "DCGM_PYTHON_PATH" in exporter.log()


def test_backend_dcgm_exits_non_zero_with_an_actionable_message(tmp_path: Path) -> None:
    no_dcgm_here()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_EXPORTER_")}
    env["DCGM_PYTHON_PATH"] = str(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "gpu_exporter", "--backend", "dcgm", "--web.listen-address", "127.0.0.1:0"],
        capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith("gpu-exporter: error: --backend dcgm: DCGM cannot be used: pydcgm")
    for hint in ("datacenter-gpu-manager-4-core", "DCGM_PYTHON_PATH", "--backend nvml"):
        assert hint in message
    assert "Traceback" not in result.stderr
