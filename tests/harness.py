"""Out-of-process test harness: start the real ``gpu-exporter`` on 127.0.0.1 against the fake NVML,
scrape it over HTTP, stop it by PID.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = REPO / "tests" / "scenarios"

Labels = frozenset[tuple[str, str]]


#: The exporter's start-up line names the address it listens on, with the port the kernel gave for port 0.
EXPORTER_LISTENING = re.compile(rb"listening on \S*:(\d+) \(")
#: Prometheus' and Alertmanager's (exporter-toolkit's) line naming the address they listen on.
TOOLKIT_LISTENING = re.compile(rb'msg="Listening on" address=\S*:(\d+)')
_started = itertools.count(1)


def bound_port(
    log_path: Path, alive: Callable[[], bool], pattern: re.Pattern[bytes] = EXPORTER_LISTENING, timeout: float = 30
) -> int:
    """The port a server started on port 0 reports in its log. The kernel picks it as the server binds, so no
    other process can take it between a choice and a bind (the old race); fails with the log when the server
    exits or never says."""
    deadline = time.monotonic() + timeout
    while True:
        text = log_path.read_bytes() if log_path.exists() else b""
        found = pattern.search(text)
        if found:
            return int(found.group(1))
        if not alive():
            raise AssertionError(f"{log_path.name}: exited before it listened:\n{text.decode(errors='replace')}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{log_path.name}: no listening line in {timeout} s:\n{text.decode(errors='replace')}")
        time.sleep(0.02)


@contextmanager
def served(command: list[str], log: Path, ready_path: str, timeout: float = 30) -> Iterator[str]:
    """Start a Prometheus or Alertmanager ``command`` that listens on ``127.0.0.1:0``, with output to ``log``;
    yield its URL once GET ``ready_path`` answers 200; stop it by PID."""
    assert "--web.listen-address=127.0.0.1:0" in command, "served() reads the port of a server on port 0"
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{bound_port(log, lambda: proc.poll() is None, TOOLKIT_LISTENING, timeout)}"
        deadline = time.monotonic() + timeout
        while True:
            assert proc.poll() is None, f"{command[0]} exited:\n{log.read_text()}"
            try:
                if httpx.get(url + ready_path, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"{command[0]} not ready in {timeout}s:\n{log.read_text()}"
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def log_name(kind: str) -> str:
    """A file name unique within the test process for a started server's log or trace (``exporter-3.log``)."""
    return f"{kind}-{next(_started)}"


@dataclass
class Exporter:
    """A running exporter process and how to reach it."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    trace_path: Path | None = None
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str, **kwargs: object) -> httpx.Response:
        return httpx.get(self.url + path, timeout=10, **kwargs)  # type: ignore[arg-type]

    def metrics(self) -> str:
        response = self.get("/metrics")
        assert response.status_code == 200, response.text
        return response.text

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def trace_lines(self) -> int:
        """NVML calls made so far (the fake appends one line per call to the trace file), leaving out
        the Xid listener's ``nvmlEventSetWait`` calls, which run on their own clock, not per scrape."""
        assert self.trace_path is not None
        if not self.trace_path.exists():
            return 0
        return sum(1 for line in self.trace_path.read_bytes().splitlines() if not line.startswith(b"nvmlEventSetWait"))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


#: Environment variables that give the interval (directly, or through a config file).
INTERVAL_ENV = ("GPU_EXPORTER_COLLECT_INTERVAL", "DCGM_EXPORTER_INTERVAL", "GPU_EXPORTER_CONFIG_FILE")


def start(
    fakenvml_dir: Path | None,
    scenario: Path | None,
    workdir: Path,
    *args: str,
    env: dict[str, str] | None = None,
    trace: bool = False,
    wait_for: str = "/healthz",
    pin_interval: bool = True,
) -> Exporter:
    """Start ``python -m gpu_exporter`` on loopback port 0 (the port it got is read from its log) and wait
    until ``wait_for`` answers 200.
    Unless the test gives an interval (a flag, the environment or a config file), it runs at
    ``--collect-interval 1s``, the pace the tests were written for (``pin_interval=False``: the
    backend's default)."""
    stem = log_name("exporter")
    log_path = workdir / f"{stem}.log"
    trace_path = workdir / f"{stem}-trace.txt" if trace else None
    child_env = {k: v for k, v in os.environ.items() if not k.startswith(("GPU_EXPORTER_", "FAKE_NVML_"))}
    if fakenvml_dir is not None:
        child_env["LD_LIBRARY_PATH"] = str(fakenvml_dir)
    if scenario is not None:
        child_env["FAKE_NVML_SCENARIO"] = str(scenario)
    if trace_path is not None:
        child_env["FAKE_NVML_TRACE"] = str(trace_path)
    child_env.update(env or {})
    # No control socket unless a test asks for one (--control.socket): the default is one per host, under /run.
    child_env.setdefault("GPU_EXPORTER_CONTROL_SOCKET", "")
    given = any(
        arg in ("-c", "--collect-interval", "--config.file") or arg.startswith("--collect-interval=") for arg in args
    )
    given = given or any(name in child_env for name in INTERVAL_ENV)
    pinned = ["--collect-interval", "1s"] if pin_interval and not given else []
    command = [sys.executable, "-m", "gpu_exporter", "--web.listen-address", "127.0.0.1:0", *pinned, *args]
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=child_env, cwd=workdir)
    try:
        port = bound_port(log_path, lambda: process.poll() is None)
    except AssertionError:
        Exporter(process, 0, log_path).stop()
        raise AssertionError(
            f"exporter exited ({process.returncode}) or never listened:\n{log_path.read_text()}"
        ) from None
    exporter = Exporter(process, port, log_path, trace_path)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"exporter exited with {process.returncode}:\n{exporter.log()}")
        try:
            if exporter.get(wait_for).status_code == 200:
                return exporter
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    exporter.stop()
    raise AssertionError(f"exporter did not answer {wait_for} with 200 in 30 s:\n{exporter.log()}")


def scrape_until(
    exporter: Exporter, check: Callable[[dict[str, dict[Labels, float]]], bool], timeout: float = 15.0
) -> dict[str, dict[Labels, float]]:
    """Scrape until ``check`` holds on the parsed exposition (the event a test waits for, e.g. every GPU's
    first read); fail with the last scrape otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        parsed = samples(exporter.metrics())
        if check(parsed):
            return parsed
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met in {timeout}s; last scrape:\n{exporter.metrics()}")
        time.sleep(0.1)


#: The exporter's own clock of cycles: the Unix time of the last cycle that read a GPU.
LAST_SAMPLE = re.compile(r"^gpu_exporter_last_sample_timestamp_seconds (\S+)$", re.MULTILINE)


def wait_cycles(exporter: Exporter, n: int, timeout: float = 60.0) -> str:
    """Wait until the exporter has published ``n`` more cycles that read a GPU
    (``gpu_exporter_last_sample_timestamp_seconds`` took ``n`` new values since the call) and return that
    exposition. Polled every 50 ms: at a 1 s interval no cycle is missed; at a faster one a missed value
    only means waiting longer, so it is at least ``n`` cycles. The deadline only fails the test."""
    deadline = time.monotonic() + timeout
    text = exporter.metrics()
    found = LAST_SAMPLE.search(text)
    seen, changes = (found.group(1) if found else None), 0
    while True:
        found = LAST_SAMPLE.search(text)
        stamp = found.group(1) if found else None
        if stamp != seen:
            seen, changes = stamp, changes + 1
            if changes >= n:
                return text
        if time.monotonic() > deadline:
            raise AssertionError(f"{changes} of {n} cycles in {timeout}s; last scrape:\n{text}")
        time.sleep(0.05)
        text = exporter.metrics()


def wait_published(exporter: Exporter, at: float, timeout: float = 60.0) -> str:
    """Wait for a cycle that read a GPU at Unix time ``at`` or later (by the exporter's clock:
    ``gpu_exporter_last_sample_timestamp_seconds``) and return that exposition; for a window measured in
    the exporter's own cycles. The deadline only fails the test."""
    deadline = time.monotonic() + timeout
    while True:
        text = exporter.metrics()
        found = LAST_SAMPLE.search(text)
        if found and float(found.group(1)) >= at:
            return text
        if time.monotonic() > deadline:
            raise AssertionError(f"no cycle published at {at} or later in {timeout}s; last scrape:\n{text}")
        time.sleep(0.1)


def wait_trace(exporter: Exporter, call: str | tuple[str, ...], count: int, timeout: float = 60.0) -> list[str]:
    """Wait until the fake's trace holds ``count`` lines that begin with ``call`` (a symbol, or a symbol
    and its GPU: ``"nvmlDeviceGetMemoryInfo_v2 gpu0"``; a tuple: any of them) and return the trace's
    lines; for waits on calls, or that must not scrape ``/metrics``. The deadline only fails the test."""
    calls = (call,) if isinstance(call, str) else call
    assert exporter.trace_path is not None, "wait_trace needs start(..., trace=True)"
    deadline = time.monotonic() + timeout
    while True:
        text = exporter.trace_path.read_text() if exporter.trace_path.exists() else ""
        lines = text.splitlines()
        got = sum(line.partition(" ")[0] in calls or " ".join(line.split()[:2]) in calls for line in lines)
        if got >= count:
            return lines
        if time.monotonic() > deadline:
            tail = "\n".join(lines[-20:])
            raise AssertionError(f"{got} of {count} {call!r} calls in {timeout}s; the trace ends:\n{tail}")
        time.sleep(0.05)


def samples(text: str) -> dict[str, dict[Labels, float]]:
    """Parse an exposition into {sample name: {labels: value}}."""
    parsed: dict[str, dict[Labels, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            parsed.setdefault(sample.name, {})[frozenset(sample.labels.items())] = sample.value
    return parsed


def value(parsed: dict[str, dict[Labels, float]], metric: str, /, **labels: str) -> float | None:
    """The one sample of ``metric`` whose labels include ``labels``; None when there is none."""
    matches = [v for key, v in parsed.get(metric, {}).items() if set(labels.items()) <= set(key)]
    assert len(matches) <= 1, f"{metric}{labels} matches {len(matches)} samples"
    return matches[0] if matches else None


#: Lines whose values change from run to run; the one documented filter for golden files.
VOLATILE = re.compile(
    r"^(gpu_exporter_sample_duration_seconds|gpu_exporter_last_sample_timestamp_seconds"
    r"|gpu_exporter_device_read_duration_seconds|gpu_exporter_collector_duration_seconds|gpu_utilization_seconds_total"
    r"|gpu_idle_while_allocated_seconds_total|gpu_energy_joules_total"
    r"|DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION)(\{[^}]*\})? .*$"
    r"|^(gpu_exporter_build_info\{.*)python_version=\"[^\"]*\"(.*)$",
    re.MULTILINE,
)


#: Energy counters: the fake's is the scenario's ``energy`` plus the integral of ``power.usage`` since
#: init (exact, as the driver's), so it grows with the time a test takes.
ENERGY = ("gpu_energy_joules_total", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")


def energy_in_range(got: float | None, at_init: float, watts: float, seconds: float = 60.0) -> bool:
    """``got`` (in the unit of ``at_init``, the scenario's ``energy`` scaled) is the counter at init plus
    at most ``watts`` (in that unit per second) for ``seconds``."""
    return got is not None and at_init <= got <= at_init + watts * seconds


def stable(text: str) -> str:
    """Replace run-dependent values by ``<volatile>`` (see VOLATILE), keeping every name and label."""

    def repl(match: re.Match[str]) -> str:
        if match.group(1):
            return f"{match.group(1)}{match.group(2) or ''} <volatile>"
        return f'{match.group(3)}python_version="<volatile>"{match.group(4)}'

    return VOLATILE.sub(repl, text)


@pytest.fixture
def exporters(tmp_path: Path) -> Iterator[list[Exporter]]:
    """Collects exporters a test starts and stops them all at teardown."""
    running: list[Exporter] = []
    yield running
    for exporter in running:
        exporter.stop()


def tool(name: str, install: str) -> str:
    """``name`` from the virtual environment's bin folder or PATH; fail saying what installs it otherwise."""
    local = Path(sys.executable).parent / name
    if local.is_file():
        return str(local)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} not found: run scripts/test, which installs {install}", pytrace=False)
    return found
