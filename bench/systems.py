"""Start, probe and stop the systems under test, each as its own process on 127.0.0.1.

- ``gpu-exporter``: this repository, ``python -m gpu_exporter`` from the interpreter running the harness;
- ``nvitop-exporter``: version NVITOP_VERSION from PyPI, in a throwaway venv under the cache directory;
- ``ceiling``: ``python -m bench.ceiling`` serving bytes captured from gpu-exporter.

The exporters get the fake ``libnvidia-ml.so.1`` through LD_LIBRARY_PATH and the scenario through
FAKE_NVML_SCENARIO. Every process is stopped by its PID (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NVITOP_VERSION = "1.7.2"
PY_SPY_VERSION = "0.4.3"
GPU_EXPORTER = "gpu-exporter"
NVITOP = "nvitop-exporter"
CEILING = "ceiling"
FLOOR = "floor"
#: What Prometheus 2.x/3.x sends when it scrapes (OpenMetrics preferred, text accepted; gzip).
PROMETHEUS_HEADERS = {
    "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
}
SYSTEMS = (GPU_EXPORTER, NVITOP, CEILING, FLOOR)


class SetupError(RuntimeError):
    """Something the harness needs could not be prepared; the message says what."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _venv(path: Path, packages: list[str], probe: list[str], log: Callable[[str], None]) -> Path:
    """A venv at ``path`` holding ``packages``; reused when ``probe`` (run with the venv's bin on
    PATH) succeeds, created (or repaired) with pip from PyPI otherwise."""
    bin_dir = path / "bin"

    def ready() -> bool:
        env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
        try:
            return subprocess.run(probe, env=env, capture_output=True, timeout=60, check=False).returncode == 0
        except OSError:
            return False

    if (bin_dir / "python").exists() and ready():
        return path
    log(f"creating {path} with {' '.join(packages)} (pip, from PyPI)")
    if not (bin_dir / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=300)
    result = subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *packages],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if result.returncode != 0 or not ready():
        raise SetupError(f"could not install {' '.join(packages)} into {path}:\n{result.stderr.strip()[-2000:]}")
    return path


def nvitop_venv(cache: Path, log: Callable[[str], None]) -> Path:
    """The venv with nvitop-exporter==NVITOP_VERSION (and nothing of this project)."""
    path = cache / f"nvitop-exporter-{NVITOP_VERSION}"
    probe = [str(path / "bin" / "python"), "-c", _version_check("nvitop-exporter", NVITOP_VERSION)]
    return _venv(path, [f"nvitop-exporter=={NVITOP_VERSION}"], probe, log)


def py_spy(cache: Path, log: Callable[[str], None]) -> Path:
    """The ``py-spy`` binary, from PyPI into its own venv under the cache."""
    path = cache / f"py-spy-{PY_SPY_VERSION}"
    probe = [str(path / "bin" / "py-spy"), "--version"]
    return _venv(path, [f"py-spy=={PY_SPY_VERSION}"], probe, log) / "bin" / "py-spy"


def _version_check(dist: str, wanted: str) -> str:
    return f"import importlib.metadata as m, sys; sys.exit(m.version({dist!r}) != {wanted!r})"


@dataclass
class Running:
    """A started system: its process (stopped by PID), port and log file."""

    system: str
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM by PID, up to 10 s for a clean exit, then SIGKILL."""
        if self.process.poll() is not None:
            return
        os.kill(self.pid, signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(self.pid, signal.SIGKILL)
            self.process.wait(10)


def _child_env(fake_dir: Path | None, scenario: Path | None, trace: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPU_EXPORTER_", "FAKE_NVML_", "DCGM"))}
    if fake_dir is not None:
        env["LD_LIBRARY_PATH"] = str(fake_dir)
    if scenario is not None:
        env["FAKE_NVML_SCENARIO"] = str(scenario)
    if trace is not None:
        env["FAKE_NVML_TRACE"] = str(trace)
    return env


def _popen(system: str, command: list[str], env: dict[str, str], port: int, workdir: Path) -> Running:
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / f"{system}-{port}.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            command, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=REPO
        )
    return Running(system, process, port, log_path)


def start_gpu_exporter(
    fake_dir: Path, scenario: Path, interval_s: float | None, workdir: Path, trace: Path | None = None
) -> Running:
    """``python -m gpu_exporter`` (the NVML backend, so a DCGM on this host is never picked); with
    ``interval_s`` None it is started without ``--collect-interval`` (its own default interval)."""
    port = free_port()
    command = [
        sys.executable, "-m", "gpu_exporter", "--web.listen-address", f"127.0.0.1:{port}",
        *(["--collect-interval", f"{interval_s:g}s"] if interval_s is not None else []), "--backend", "nvml",
    ]  # fmt: skip
    return _popen(GPU_EXPORTER, command, _child_env(fake_dir, scenario, trace), port, workdir)


def start_nvitop(
    venv: Path, fake_dir: Path, scenario: Path, interval_s: float, workdir: Path, trace: Path | None = None
) -> Running:
    """``nvitop-exporter --bind-address 127.0.0.1 --port P --interval S``."""
    port = free_port()
    command = [
        str(venv / "bin" / "nvitop-exporter"), "--bind-address", "127.0.0.1", "--port", str(port),
        "--interval", f"{interval_s:g}",
    ]  # fmt: skip
    return _popen(NVITOP, command, _child_env(fake_dir, scenario, trace), port, workdir)


def start_floor(
    plan: Path, fake_dir: Path, scenario: Path, interval_s: float, workdir: Path, trace: Path | None = None
) -> Running:
    """``python -m bench.floor`` (no port: it serves nothing; ready when its log says so)."""
    command = [sys.executable, "-m", "bench.floor", "--plan", str(plan), "--interval", f"{interval_s:g}"]
    return _popen(FLOOR, command, _child_env(fake_dir, scenario, trace), free_port(), workdir)


def wait_floor(running: Running, timeout_s: float) -> None:
    """Until the floor's log says ``floor ready`` (SetupError if it exits or the time passes)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if running.process.poll() is not None:
            raise SetupError(f"floor exited with {running.process.returncode}:\n{running.log_tail()}")
        if "floor ready" in running.log_tail(5):
            return
        time.sleep(0.1)
    raise SetupError(f"floor not ready in {timeout_s:g} s:\n{running.log_tail()}")


def start_ceiling(body: Path, content_type: str, workdir: Path) -> Running:
    """``python -m bench.ceiling`` serving ``body``."""
    port = free_port()
    command = [
        sys.executable, "-m", "bench.ceiling", "--port", str(port), "--body", str(body),
        "--content-type", content_type,
    ]  # fmt: skip
    return _popen(CEILING, command, _child_env(None, None, None), port, workdir)


@dataclass(frozen=True)
class Scrape:
    """One scrape: the body and its Content-Type."""

    body: bytes
    content_type: str


def scrape(url: str, timeout_s: float = 30.0, headers: dict[str, str] | None = None) -> Scrape:
    """GET ``url`` as wrk does (no Accept, no Accept-Encoding: uncompressed text), or with ``headers``."""
    request = urllib.request.Request(url, headers=headers or {"Accept-Encoding": "identity"})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return Scrape(response.read(), response.headers.get("Content-Type", ""))


def wait_ready(running: Running, expect: bytes, timeout_s: float) -> Scrape:
    """Scrape until the body contains ``expect`` (e.g. the last GPU's UUID); raise SetupError with the
    log tail when the process exits or ``timeout_s`` passes first."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        if running.process.poll() is not None:
            raise SetupError(f"{running.system} exited with {running.process.returncode}:\n{running.log_tail()}")
        try:
            got = scrape(running.url, timeout_s=10.0)
            if expect in got.body:
                return got
            last = f"answered without {expect!r} yet"
        except (OSError, urllib.error.URLError) as err:
            last = str(err)
        time.sleep(0.1)
    raise SetupError(f"{running.system} not ready in {timeout_s:g} s ({last}):\n{running.log_tail()}")
