"""Signals by PID on the real exporter: SIGTERM, SIGINT and SIGQUIT stop it cleanly with exit 0 and
one line; SIGHUP, SIGUSR1 and SIGUSR2 never kill it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness import SCENARIOS, Exporter
from tests.webtls import launch


def _wait_exit(process: subprocess.Popen[bytes], seconds: float = 20) -> int:
    return process.wait(seconds)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGQUIT])
def test_stop_signals_exit_0_with_one_line(fakenvml_dir: Path, tmp_path: Path, signum: signal.Signals) -> None:
    exporter = launch(fakenvml_dir, tmp_path, "--collect-interval", "200ms")
    try:
        assert exporter.get("/metrics").status_code == 200
        exporter.process.send_signal(signum)
        assert _wait_exit(exporter.process) == 0
    finally:
        exporter.stop()
    log = exporter.log()
    assert log.count(f"received {signum.name}: shutting down") == 1
    assert "Application shutdown complete" in log
    if signum == signal.SIGQUIT:
        assert "most recent call first" in log  # every thread's stack, as operators expect of SIGQUIT
    else:
        assert "Traceback" not in log and "most recent call" not in log


def _logged(exporter: Exporter, line: str, times: int, seconds: float = 15) -> None:
    """Wait until ``line`` is in the log ``times`` times (the event), failing with the log otherwise."""
    deadline = time.monotonic() + seconds
    while exporter.log().count(line) < times:
        assert exporter.process.poll() is None, exporter.log()
        assert time.monotonic() < deadline, f"{line!r} not logged {times} times in {seconds}s:\n{exporter.log()}"
        time.sleep(0.05)


def _serving(exporter: Exporter) -> bool:
    """The server's own signal handlers are in place once it answers (they are installed before its
    start-up, which comes before its first answer); until then SIGHUP is ignored, by design."""
    return exporter.get("/healthz").status_code == 200


def test_hup_and_usr_signals_never_kill(fakenvml_dir: Path, tmp_path: Path) -> None:
    """Each signal is sent once the previous one's line is logged: no fixed sleeps (a full run once saw
    one of two SIGHUPs unlogged: the first was sent as soon as the port accepted, before the server's
    handlers replaced the start-up ones, which ignore SIGHUP)."""
    exporter = launch(fakenvml_dir, tmp_path, "--collect-interval", "200ms", ready=_serving)
    try:
        expected = {
            signal.SIGHUP: "reload done",
            signal.SIGUSR1: "received SIGUSR1: stacks of every thread follow",
            signal.SIGUSR2: "received SIGUSR2: ignored",
        }
        sent: dict[signal.Signals, int] = {}
        for signum in (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP):
            exporter.process.send_signal(signum)
            sent[signum] = sent.get(signum, 0) + 1
            _logged(exporter, expected[signum], sent[signum])
            assert exporter.process.poll() is None, exporter.log()
            assert exporter.get("/metrics").status_code == 200
        log = exporter.log()
        assert log.count("received SIGHUP: reloading") == 2 and log.count("reload done") == 2
        assert "most recent call first" in log
        exporter.process.send_signal(signal.SIGTERM)
        assert _wait_exit(exporter.process) == 0
    finally:
        exporter.stop()


@pytest.mark.parametrize("delay", [0.0, 0.5])
def test_signals_while_starting(fakenvml_dir: Path, tmp_path: Path, delay: float) -> None:
    """Once the program runs (its first log line), a SIGHUP while starting is ignored and a SIGTERM
    still ends with exit 0 and no traceback."""
    env = {"LD_LIBRARY_PATH": str(fakenvml_dir), "FAKE_NVML_SCENARIO": str(SCENARIOS / "h100x4.scn")}
    command = [sys.executable, "-m", "gpu_exporter", "--web.listen-address", "127.0.0.1:0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    assert process.stdout is not None
    first = process.stdout.readline()
    time.sleep(delay)
    process.send_signal(signal.SIGHUP)
    time.sleep(0.2)
    assert process.poll() is None, first
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, (first + output).decode()
    assert b"Traceback" not in output
