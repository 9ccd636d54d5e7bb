"""``gpu-exporter doctor`` out of process on the fake NVML: healthy, then each failure the fake can
produce (init errors, a lost GPU), a kernel module of another version, no device nodes, no library
at all (an empty ``LD_LIBRARY_PATH``), an unreachable pod-resources socket; exit code by the worst."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpu_exporter.backends.nvml.discovery import _in_container_without_devices
from tests.harness import SCENARIOS

MODULE = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  {}  Thu Feb 22 01:44:30 UTC 2024\n"


def _doctor(
    lib: Path | None, tmp_path: Path, extra: str = "", module: str = "550.54.15", nodes: bool = True, *args: str
) -> tuple[int, dict[str, Any]]:
    scenario = tmp_path / "host.scn"
    scenario.write_text((SCENARIOS / "h100x4.scn").read_text() + extra)
    dev, proc = tmp_path / "dev", tmp_path / "proc"
    dev.mkdir(exist_ok=True)
    if nodes:
        for name in ("nvidiactl", "nvidia0", "nvidia1", "nvidia2", "nvidia3"):
            (dev / name).touch()
    (proc / "driver" / "nvidia").mkdir(parents=True, exist_ok=True)
    (proc / "driver" / "nvidia" / "version").write_text(MODULE.format(module))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPU_EXPORTER_", "FAKE_NVML_"))}
    env.update(FAKE_NVML_SCENARIO=str(scenario), LD_LIBRARY_PATH=str(lib))
    command = [sys.executable, "-m", "gpu_exporter", "doctor", "--json", "--path.dev", str(dev),
               "--path.procfs", str(proc), *args]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode in (0, 3, 4), done.stderr
    body = json.loads(done.stdout)
    return done.returncode, {check["check"]: check for check in body["checks"]}


def _status(checks: dict[str, Any]) -> dict[str, str]:
    return {name: check["status"] for name, check in checks.items()}


def test_healthy_host(fakenvml_dir: Path, tmp_path: Path) -> None:
    code, checks = _doctor(fakenvml_dir, tmp_path)
    assert code == 0
    assert _status(checks) == {
        "device nodes": "ok", "permissions": "ok", "libnvidia-ml.so.1": "ok", "kernel driver": "ok", "NVML": "ok",
        "library/driver match": "ok", "GPUs visible": "ok", "GPU 0": "ok", "GPU 0 GPM": "ok", "GPU 1": "ok",
        "GPU 1 GPM": "skip", "GPU 2": "ok", "GPU 2 GPM": "skip", "GPU 3": "ok", "GPU 3 GPM": "skip", "DCGM": "skip",
        "profiling": "skip", "pod-resources socket": "skip",
    }  # fmt: skip
    # h100x4.scn: GPM on GPU 0 only (SM activity 35 %); GPU 1-3 have no GPM (not offered, or isSupportedDevice 0)
    assert checks["GPU 0 GPM"]["found"] == "works: SM activity 35 % over the last interval"
    assert checks["GPU 3 GPM"]["found"].startswith("not offered by the driver for this GPU")
    assert checks["kernel driver"]["found"] == "loaded, version 550.54.15"
    assert checks["libnvidia-ml.so.1"]["found"] == f"loaded from {fakenvml_dir}/libnvidia-ml.so.1"


@pytest.mark.parametrize(
    ("error", "found", "fix"),
    [
        ("DRIVER_NOT_LOADED", "the NVIDIA kernel driver is not loaded", "modprobe nvidia"),
        ("LIB_RM_VERSION_MISMATCH", "libnvidia-ml.so.1 and the loaded kernel module are different driver versions "
         "(usually after a driver upgrade)", "reload the nvidia kernel modules"),
        ("NO_PERMISSION", "no permission to open /dev/nvidia*", "run as root or as a member of the group"),
    ],
)  # fmt: skip
def test_nvml_init_failures_say_why_and_the_fix(
    fakenvml_dir: Path, tmp_path: Path, error: str, found: str, fix: str
) -> None:
    code, checks = _doctor(fakenvml_dir, tmp_path, f"init.error = {error}\n")
    assert code == 4
    assert checks["NVML"]["status"] == "fail" and checks["NVML"]["found"] == found  # in words, not the label's
    if error != "LIB_RM_VERSION_MISMATCH" and _in_container_without_devices():
        fix = "NVIDIA container toolkit"  # a container given no GPU: its fix in place of the host's
    assert fix in checks["NVML"]["fix"]
    assert "GPU 0" not in checks  # nothing to ask once NVML is down


def test_kernel_module_of_another_version_warns(fakenvml_dir: Path, tmp_path: Path) -> None:
    code, checks = _doctor(fakenvml_dir, tmp_path, module="535.161.08")
    assert code == 3
    match = checks["library/driver match"]
    assert match["status"] == "warn" and match["found"] == (
        "libnvidia-ml.so.1 is 550.54.15, the kernel module 535.161.08"
    )


def test_gpm_held_by_another_profiler_warns(fakenvml_dir: Path, tmp_path: Path) -> None:
    code, checks = _doctor(fakenvml_dir, tmp_path, "gpu0.error.nvmlGpmSampleGet = IN_USE\n")
    assert code == 3
    assert checks["GPU 0 GPM"]["status"] == "warn" and "another profiler" in checks["GPU 0 GPM"]["found"]
    assert "dcgmi profile --pause" in checks["GPU 0 GPM"]["fix"]
    assert checks["GPU 0"]["status"] == "ok"


def test_a_lost_gpu_fails(fakenvml_dir: Path, tmp_path: Path) -> None:
    code, checks = _doctor(fakenvml_dir, tmp_path, "gpu1.lost_after = 0\n")
    assert code == 4
    assert checks["GPU 1"]["status"] == "fail" and checks["GPU 1"]["found"].startswith("could not be opened")
    assert checks["GPU 0"]["status"] == "ok"


def test_no_device_nodes(fakenvml_dir: Path, tmp_path: Path) -> None:
    code, checks = _doctor(fakenvml_dir, tmp_path, nodes=False)
    assert code == 4
    assert checks["device nodes"]["status"] == "fail" and checks["device nodes"]["found"].endswith("nvidiactl missing")
    assert checks["permissions"]["status"] == "skip"


def test_no_library_at_all(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    code, checks = _doctor(empty, tmp_path)
    assert code == 4
    assert checks["libnvidia-ml.so.1"]["status"] == "fail" and "not loadable" in checks["libnvidia-ml.so.1"]["found"]
    assert checks["NVML"]["found"] == "libnvidia-ml.so.1 not found"  # in words, not the reason label's word


def test_pod_resources_socket_unreachable(fakenvml_dir: Path, tmp_path: Path) -> None:
    missing = tmp_path / "kubelet.sock"
    code, checks = _doctor(
        fakenvml_dir, tmp_path, "", "550.54.15", True, "--kubernetes", "--kubernetes.pod-resources-socket", str(missing)
    )
    assert code == 4
    assert checks["pod-resources socket"]["status"] == "fail"
    assert checks["pod-resources socket"]["found"] == f"{missing}: No such file or directory"
