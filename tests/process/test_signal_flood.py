"""A flood of signals (issue 40): 300 SIGHUPs, 300 SIGUSR2s and 50 SIGUSR1s sent as fast as
possible cost a reload and a stack dump a second and a few log lines, not one reload, dump and line
each; the exporter keeps serving."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from tests.process.test_signals import _serving
from tests.webtls import launch


def test_a_signal_flood_is_taken_together(fakenvml_dir: Path, tmp_path: Path) -> None:
    exporter = launch(fakenvml_dir, tmp_path, "--collect-interval", "1h", ready=_serving)
    try:
        before = exporter.log().count("\n")
        pid = exporter.process.pid
        started = time.monotonic()
        for index in range(300):
            os.kill(pid, signal.SIGHUP)
            os.kill(pid, signal.SIGUSR2)
            if index % 6 == 0:
                os.kill(pid, signal.SIGUSR1)
            time.sleep(0.002)  # signals of one kind sent faster than taken are merged by the kernel
        taken = time.monotonic() - started
        os.kill(pid, signal.SIGHUP)
        deadline = time.monotonic() + 20
        while "SIGHUP(s) taken together" not in exporter.log():  # the one reload after the first
            assert time.monotonic() < deadline and exporter.process.poll() is None, exporter.log()[-3000:]
            time.sleep(0.1)
        assert exporter.get("/metrics").status_code == 200
        log = exporter.log()
        reloads, dumps = log.count("reload done"), log.count("Current thread")
        assert reloads <= taken + 3 and dumps <= taken + 2, (reloads, dumps, taken)
        lines = [line for line in log.splitlines()[before:] if line.startswith("ts=")]
        assert len(lines) < 60, "\n".join(lines[-40:])
    finally:
        exporter.stop()
