"""The machine a run happened on, and the software versions involved."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench import procfs


def _relative(path: str, repo: Path) -> str:
    """``path`` relative to the repository when it is inside it (results carry no machine paths)."""
    try:
        return str(Path(path).relative_to(repo))
    except ValueError:
        return Path(path).name


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _virtualized() -> bool:
    return any(
        line.startswith("flags") and " hypervisor" in line for line in Path("/proc/cpuinfo").read_text().splitlines()
    )


def _mem_total_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 1024 / 1024
    return 0.0


def _os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return platform.system()


def _versions(python: str, dists: list[str]) -> dict[str, str]:
    code = f"import importlib.metadata as m, json\nprint(json.dumps({{d: m.version(d) for d in {dists!r}}}))"
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    return dict(json.loads(out.stdout)) if out.returncode == 0 else {}


def _git(repo: Path) -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"], cwd=repo, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + (" (src/ has uncommitted changes)" if dirty else "")


def describe(repo: Path, nvitop_python: Path | None, wrk_version: str) -> dict[str, Any]:
    """CPU, cores, memory, kernel, OS, Python and package versions, git commit, load now."""
    ours = ["gpu-exporter", "starlette", "uvicorn", "h11", "prometheus_client", "nvidia-ml-py"]
    info: dict[str, Any] = {
        "cpu_model": _cpu_model(),
        "cpus": os.cpu_count(),
        "virtual_machine": _virtualized(),
        "memory_gib": round(_mem_total_gib(), 1),
        "kernel": platform.release(),
        "os": _os_name(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "gpu_exporter_commit": _git(repo),
        "packages": {name: importlib.metadata.version(name) for name in ours},
        "wrk": wrk_version,
        "clock_ticks_per_s": procfs.CLOCK_TICKS,
        "executable": _relative(sys.executable, repo),
    }
    if nvitop_python is not None:
        info["nvitop_packages"] = _versions(
            str(nvitop_python), ["nvitop-exporter", "nvitop", "prometheus_client", "psutil", "nvidia-ml-py"]
        )
    return info
