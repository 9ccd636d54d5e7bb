"""The last unbounded inputs of issue 40, each against the real exporter: a request head that arrives
whole in one read, passwd and /proc files with digits that are not ASCII, a --simulate scenario
rewritten huge."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from tests.harness import SCENARIOS, samples, start, value
from tests.process.test_processes import _run
from tests.webtls import launch


def _answer(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        return sock.recv(65536)


def test_the_head_bound_holds_however_the_bytes_arrive(fakenvml_dir: Path, tmp_path: Path) -> None:
    """A 40 KB request line sent in one write arrives in one read: still 431, like one sent slowly."""
    exporter = launch(fakenvml_dir, tmp_path, "--collect-interval", "1h")
    try:
        long_line = b"GET /" + b"a" * 40_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"
        assert _answer(exporter.port, long_line).startswith(b"HTTP/1.1 431")
        headers = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"".join(
            b"X-%d: %s\r\n" % (n, b"v" * 900) for n in range(20)
        )
        assert _answer(exporter.port, headers + b"\r\n").startswith(b"HTTP/1.1 431")  # 18 KB of headers
        assert _answer(exporter.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 200")
    finally:
        exporter.stop()


def test_a_passwd_line_with_a_unicode_digit_harms_no_other_line(fakenvml_dir: Path, tmp_path: Path) -> None:
    """uids written with digits that are not ASCII (superscript two, Arabic-Indic three) are not uids:
    those lines are skipped and every process keeps its name and user."""
    passwd = tmp_path / "host-passwd"
    passwd.write_text("root:x:0:0::/root:/bin/sh\nsquare:x:\u00b2:0::/:/bin/sh\narabic:x:\u0663:0::/:/bin/sh\n"
                      "ops:x:4000:4000::/:/bin/sh\n")  # fmt: skip
    parsed = samples(_run(fakenvml_dir, tmp_path, "--path.passwd", str(passwd)))
    assert value(parsed, "gpu_processes", gpu="0", pid="4242", process="python3", user="root") == 1
    assert value(parsed, "gpu_processes", gpu="0", pid="4444", user="ops") == 1


def test_a_scenario_rewritten_huge_is_not_read_again(tmp_path: Path) -> None:
    """--simulate FILE is read again when it changes, bounded as at start (1 MiB): an 8 MiB rewrite is
    refused with one warning and the previous scenario stays in force."""
    scenario = tmp_path / "host.scn"
    scenario.write_text((SCENARIOS / "h100x4.scn").read_text())
    exporter = start(None, None, tmp_path, "--simulate", str(scenario), "--collect-interval", "200ms")
    try:
        assert "gpu_power_watts{" in exporter.metrics()
        huge = tmp_path / "next.scn"  # replaced whole: a file rewritten in place is read half-written too
        huge.write_text("# padding\n" * 800_000 + (SCENARIOS / "h100x4.scn").read_text())
        os.replace(huge, scenario)
        deadline = time.monotonic() + 30
        while "cannot re-read" not in exporter.log():
            assert time.monotonic() < deadline, exporter.log()[-2000:]
            time.sleep(0.1)
        assert "larger than 1 MiB); keeping the previous one" in exporter.log()
        assert "gpu_power_watts{" in exporter.metrics()
    finally:
        exporter.stop()
